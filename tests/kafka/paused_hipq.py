"""``python tests/kafka/paused_hipq.py PAUSE_FILE <hipq arguments>``: the real
``hipq`` command, except that its Kafka response consumer is built with
``pause_file=PAUSE_FILE`` (it writes the file after its first inbox insert and
then waits without committing, for a test to SIGKILL it right there).

The hook is injected here, in the test's own process wrapper: the daemon reads
no environment variable for it."""

from __future__ import annotations

import functools
import sys
from typing import Any

from hipq import cli
from hipq.responses import kafka_consumer as kafka


def main(argv: list[str]) -> int:
    pause_file, rest = argv[0], argv[1:]
    original = kafka.KafkaResponseConsumer.__init__

    @functools.wraps(original)
    def init(self: kafka.KafkaResponseConsumer, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("pause_file", pause_file)
        original(self, *args, **kwargs)

    kafka.KafkaResponseConsumer.__init__ = init  # type: ignore[method-assign]
    return cli.main(rest)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

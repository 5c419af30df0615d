"""The ``hipq`` command: the only place that reads files and the environment, sets
up logging and installs signal handlers.

Parsing imports nothing but :mod:`argparse` (``hipq --help`` answers at once); a
command's module is imported when it runs. ``-c/--config`` may come before or after
the command name; without it ``$HIPQ_CONFIG``, then ``./hipq.yaml``, then built-in
defaults. The current directory is put first on the import path (as uvicorn does),
so plugins and Python targets in the user's own files load by ``module:attr``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from hipq.cli.parser import build_parser

EXIT_ERROR = 1
EXIT_CONFIG = 2


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    args.config = args.config or os.environ.get("HIPQ_CONFIG") or None
    module_name, _, func_name = args.target.partition(":")
    from hipq.errors import ConfigError, HipqError

    try:
        command = getattr(importlib.import_module(module_name), func_name)
        result: int = command(args)
        return result
    except ConfigError as exc:
        _fail(str(exc))
        return EXIT_CONFIG
    except HipqError as exc:
        _fail(" ".join(str(exc).split()))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def _fail(message: str) -> None:
    """The error on stderr: its own line breaks kept, other control characters escaped."""
    from hipq.log import printable

    lines = "\n".join(printable(line) for line in message.split("\n"))
    sys.stderr.write(f"hipq: error: {lines}\n")


__all__ = ["EXIT_CONFIG", "EXIT_ERROR", "main"]

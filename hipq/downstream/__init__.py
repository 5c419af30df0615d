"""The other side of a launch (README.md, "From another service"): helpers that make
a partner-facing worker about ten lines.

    from hipq.downstream import Fail, Launch, callback_app
    from aiohttp import web

    async def handle(launch: Launch) -> dict:
        if launch.data.get("amount", 0) < 0:
            raise Fail("negative amount")           # failed, not retried
        return {"charged": launch.data["amount"]}   # succeeded, kept as the result

    web.run_app(callback_app(handle, hipq_urls="http://hipq:8080", heartbeat_seconds=10),
                port=9000)  # many launches a second: loop=uvloop.new_event_loop()

:func:`callback_app` serves HTTP launches (``mode: callback``);
:class:`KafkaResponder` answers Kafka launches. A handler returns the result,
raises :class:`Fail` for a failure (``retryable=False`` by default), or raises
anything else for a retryable failure.

Both are safe to expose: ``callback_app`` posts outcomes only to hipq's signed
response route (``/v1/responses/{key}?...sig=...``) on the hipq daemons it is given
(``hipq_urls``; 403 for any other URL, and for any other path of hipq's), follows no
redirects, gives up on an outcome after ``callback_deadline_seconds``, bounds its
pending launches (``max_pending``: 503) and can require hipq's credentials
(``auth``: 401); ``KafkaResponder`` skips (and logs) a record it cannot read. No
repr or log line of theirs shows a callback signature or a token.

The names below are imported on first use (PEP 562): ``KafkaResponder`` alone does
not load the aiohttp server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hipq.downstream._launch import Fail, Handler, Launch
    from hipq.downstream.callback import callback_app
    from hipq.downstream.kafka_responder import KafkaResponder

_WHERE = {
    "Fail": "hipq.downstream._launch",
    "Handler": "hipq.downstream._launch",
    "KafkaResponder": "hipq.downstream.kafka_responder",
    "Launch": "hipq.downstream._launch",
    "callback_app": "hipq.downstream.callback",
}

__all__ = ["Fail", "Handler", "KafkaResponder", "Launch", "callback_app"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

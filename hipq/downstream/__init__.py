"""The other side of a launch (SPEC 13): helpers that make a partner-facing worker
about ten lines.

    from hipq.downstream import Fail, Launch, callback_app
    from aiohttp import web

    async def handle(launch: Launch) -> dict:
        if launch.data.get("amount", 0) < 0:
            raise Fail("negative amount")           # failed, not retried
        return {"charged": launch.data["amount"]}   # succeeded, kept as the result

    web.run_app(callback_app(handle, heartbeat_seconds=10), port=9000)

:func:`callback_app` serves HTTP launches (``mode: callback``);
:class:`KafkaResponder` answers Kafka launches. A handler returns the result,
raises :class:`Fail` for a failure (``retryable=False`` by default), or raises
anything else for a retryable failure.
"""

from hipq.downstream._launch import Fail, Handler, Launch
from hipq.downstream.http import callback_app
from hipq.downstream.kafka import KafkaResponder

__all__ = ["Fail", "Handler", "KafkaResponder", "Launch", "callback_app"]

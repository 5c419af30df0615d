"""``callback_app``: the downstream side of an HTTP launch in ``callback`` mode.

Each launch POST (any path) is answered 202 at once; the handler then runs in a
task (at most ``concurrency`` at a time) and its outcome is POSTed to the
launch's signed ``callback_url``. While the handler runs, a heartbeat
(``{"status": "running"}``) goes to the same URL every ``heartbeat_seconds``, so a
queue's ``heartbeat_timeout_seconds`` sees the job alive.

Delivery: the outcome is retried with back-off (0.1 s doubling to 5 s) until hipq
answers 2xx (stored) or 409 (a stale or finished try: nothing more to say). A 4xx
that no retry can change (400, 401, 404, 413, 422) is logged and dropped. The
outcome lives only in this process: a downstream that stops before delivering it
leaves the job to its deadline (hipq then retries it per its queue).

At most ``concurrency`` callbacks are in flight; the others wait their turn, and
the timeout (10 s to connect, 10 s between reads) runs only once a request is on
its way. (A timeout that also counted the wait for a free connection made a burst
of thousands of launches time out in the queue, send every callback again, and
collapse the throughput of both sides.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from hipq.clock import Clock, SystemClock
from hipq.downstream._launch import BadLaunch, Handler, Launch, outcome

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 100
CALLBACK_TIMEOUT_SECONDS = 10.0
FIRST_RETRY_SECONDS = 0.1
MAX_RETRY_SECONDS = 5.0
HEARTBEAT = {"status": "running"}
ACCEPTED_BODY = b'{"accepted":true}'  # encoded once: every launch gets the same answer


def callback_app(handler: Handler, *, concurrency: int = DEFAULT_CONCURRENCY,
                 heartbeat_seconds: float | None = None,
                 clock: Clock | None = None) -> web.Application:
    """An aiohttp application for hipq's launch POSTs: run it with
    ``web.run_app(callback_app(handle))`` or an ``AppRunner``."""
    worker = CallbackWorker(handler, concurrency=concurrency,
                            heartbeat_seconds=heartbeat_seconds, clock=clock or SystemClock())
    app = web.Application()
    app[WORKER] = worker
    app.router.add_post("/{tail:.*}", worker.accept)
    app.cleanup_ctx.append(worker.lifespan)
    return app


class CallbackWorker:
    def __init__(self, handler: Handler, *, concurrency: int, heartbeat_seconds: float | None,
                 clock: Clock) -> None:
        self.handler = handler
        self.heartbeat_seconds = heartbeat_seconds
        self.clock = clock
        self._concurrency = concurrency
        self._slots = asyncio.Semaphore(concurrency)  # handlers running
        self._sending = asyncio.Semaphore(concurrency)  # callbacks in flight
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None

    async def lifespan(self, app: web.Application) -> AsyncIterator[None]:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CALLBACK_TIMEOUT_SECONDS,
                                        sock_read=CALLBACK_TIMEOUT_SECONDS)
        self._session = aiohttp.ClientSession(
            timeout=timeout, connector=aiohttp.TCPConnector(limit=self._concurrency))
        yield
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._session.close()

    async def accept(self, request: web.Request) -> web.Response:
        try:
            launch = Launch.from_json(await request.json(), correlation_key=request.headers.get(
                "Hipq-Correlation-Key"))
        except (ValueError, BadLaunch) as exc:
            return web.json_response({"error": {"code": "bad_launch", "message": str(exc)}},
                                     status=400)
        if launch.callback_url is None:
            return web.json_response({"error": {"code": "bad_launch", "message":
                                                "the launch has no callback_url"}}, status=400)
        task = asyncio.create_task(self._run(launch, launch.callback_url))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return web.Response(body=ACCEPTED_BODY, status=202, content_type="application/json")

    async def _run(self, launch: Launch, url: str) -> None:
        async with self._slots:
            beating = None
            if self.heartbeat_seconds is not None:
                beating = asyncio.create_task(self._heartbeats(url, self.heartbeat_seconds))
            try:
                body = await outcome(self.handler, launch)
            finally:
                if beating is not None:
                    beating.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await beating
        await self.deliver(url, body)

    async def _heartbeats(self, url: str, every: float) -> None:
        while True:
            await self.clock.sleep(every)
            try:
                await self._post(url, HEARTBEAT)
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.info("heartbeat not delivered: %r", exc, extra={"action": "heartbeat_error"})

    async def deliver(self, url: str, body: dict[str, Any]) -> None:
        """POST ``body`` until hipq takes it (2xx) or says it is too late (409)."""
        delay = FIRST_RETRY_SECONDS
        while True:
            try:
                status = await self._post(url, body)
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.info("callback not delivered (%r); again in %.1fs", exc, delay,
                         extra={"action": "callback_retry"})
            else:
                if status < 300 or status == 409:
                    return
                if 400 <= status < 500 and status not in (408, 429):
                    log.error("callback refused with %s; dropped", status,
                              extra={"action": "callback_refused"})
                    return
                log.info("callback answered %s; again in %.1fs", status, delay,
                         extra={"action": "callback_retry"})
            await self.clock.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_SECONDS)

    async def _post(self, url: str, body: dict[str, Any]) -> int:
        assert self._session is not None
        async with self._sending, self._session.post(url, json=body) as answer:
            await answer.read()
            return answer.status


WORKER = web.AppKey("hipq_downstream_worker", CallbackWorker)

"""``callback_app``: the downstream side of an HTTP launch in ``callback`` mode.

Each launch POST (any path) is answered 202 at once; the handler then runs in a
task (at most ``concurrency`` at a time) and its outcome is POSTed to the
launch's signed ``callback_url``. While the handler runs, a heartbeat
(``{"status": "running"}``) goes to the same URL every ``heartbeat_seconds``, so a
queue's ``heartbeat_timeout_seconds`` sees the job alive.

Safe to expose (docs/security.md). Before anything runs, a launch is refused:

* 401 ``unauthorized`` without hipq's credentials, when ``auth`` is given (the
  shape of an HTTP target's ``auth``; compared in constant time);
* 503 ``busy`` with ``Retry-After`` when ``max_pending`` launches (default 100 x
  ``concurrency``: 10,000, some 45 MB with small job data) are accepted and not
  yet delivered. hipq tries the job again later, but the refused try counts as an
  attempt: a queue without ``concurrency`` launches its whole backlog at once (a
  20,000-job burst had 11,000 pending here), so keep ``max_pending`` above what
  the queues launching here may have running;
* 400 ``bad_launch`` for a body that is not a launch or has no ``callback_url``;
* 403 ``callback_not_allowed`` when its ``callback_url`` is not hipq's signed
  response route (``<base>/v1/responses/{key}?...sig=...``) on one of the hipq
  origins given as ``hipq_urls``: another host, or another path of hipq's own such
  as a pause, replay or status route, a dot segment or an extra segment (see
  :mod:`hipq.downstream._guard`). Outcomes and heartbeats go only to that checked
  URL, as parsed.

Delivery: the outcome is retried with back-off (0.1 s doubling to 5 s) until hipq
answers 2xx (stored) or 409 (a stale or finished try: nothing more to say). A 4xx
that no retry can change (400, 401, 404, 413, 422) is logged and dropped.
Redirects are not followed: a 3xx is a failed delivery, retried like a 5xx (hipq
never redirects a callback; the outcome must not go where a ``Location`` says).
Past ``callback_deadline_seconds`` (default 3600) after the handler returned, the
outcome is dropped (logged once, as an error). The outcome lives only in this
process: one that is dropped, or a downstream that stops before delivering it,
leaves the job to its deadline (hipq then retries it per its queue). No log line
shows the callback URL's query (the signature, the job's token) or credentials.

At most ``concurrency`` callbacks are in flight; the others wait their turn, and
the timeout (10 s for connect, send and answer) runs only once a request is on
its way. (A timeout that also counted the wait for a free connection made a burst
of thousands of launches time out in the queue, send every callback again, and
collapse the throughput of both sides.)

Callbacks go over :mod:`hipq.targets.http_pool`, the keep-alive client of hipq's
HTTP target, at a third of aiohttp's client's CPU per request: delivery was the
larger part of what this side cost per job (bench/run ``callback``: 0.28 ms of CPU
per job with aiohttp's client, 0.17 with this one). Answers are parsed by llhttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
from collections.abc import AsyncIterator, Mapping, Sequence

from aiohttp import web
from yarl import URL

from hipq.clock import Clock, SystemClock
from hipq.downstream._guard import Origins, authorization
from hipq.downstream._launch import BadLaunch, Handler, Launch, encode_outcome, outcome
from hipq.targets.http_pool import Endpoint, HttpPool, HttpTransportError, header_block

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = 100
DEFAULT_CALLBACK_DEADLINE_SECONDS = 3600.0
PENDING_PER_SLOT = 100  # max_pending defaults to this many launches per concurrency slot
RETRY_AFTER_SECONDS = 1  # what a launch refused with 503 is told
CALLBACK_TIMEOUT_SECONDS = 10.0
FIRST_RETRY_SECONDS = 0.1
MAX_RETRY_SECONDS = 5.0
RETRYABLE_4XX = frozenset({408, 429})
HEARTBEAT_BODY = b'{"status":"running"}'
ACCEPTED_BODY = b'{"accepted":true}'  # encoded once: every launch gets the same answer
JSON_HEADERS = header_block([("Content-Type", "application/json"),
                             ("Accept-Encoding", "identity")])
MAX_ANSWER_BYTES = 64 * 1024  # hipq's answers to a callback are a few hundred bytes
DELIVERY_ERRORS = (HttpTransportError, OSError, TimeoutError)  # OSError: refused, TLS...
_URL_QUERY = re.compile(r"(://[^\s?#'\"]*)[?#][^\s'\"]*")


def callback_app(handler: Handler, *, hipq_urls: str | Sequence[str],
                 concurrency: int = DEFAULT_CONCURRENCY,
                 heartbeat_seconds: float | None = None,
                 callback_deadline_seconds: float = DEFAULT_CALLBACK_DEADLINE_SECONDS,
                 max_pending: int | None = None, auth: Mapping[str, str] | None = None,
                 clock: Clock | None = None) -> web.Application:
    """An aiohttp application for hipq's launch POSTs: run it with
    ``web.run_app(callback_app(handle, hipq_urls="http://hipq:8080"))`` or an
    ``AppRunner``. ``hipq_urls``: the base URL of each hipq daemon (its
    ``api.public_url``). Raises ValueError for a bad ``hipq_urls`` or ``auth``."""
    worker = CallbackWorker(
        handler, origins=Origins(hipq_urls), concurrency=concurrency,
        heartbeat_seconds=heartbeat_seconds, callback_deadline_seconds=callback_deadline_seconds,
        max_pending=PENDING_PER_SLOT * concurrency if max_pending is None else max_pending,
        authorization=authorization(auth), clock=clock or SystemClock())
    app = web.Application()
    app[WORKER] = worker
    app.router.add_post("/{tail:.*}", worker.accept)
    app.cleanup_ctx.append(worker.lifespan)
    return app


class CallbackWorker:
    def __init__(self, handler: Handler, *, origins: Origins, concurrency: int,
                 heartbeat_seconds: float | None, callback_deadline_seconds: float,
                 max_pending: int, authorization: bytes | None, clock: Clock) -> None:
        if concurrency < 1 or max_pending < 1 or not callback_deadline_seconds > 0:
            raise ValueError("concurrency and max_pending must be at least 1, "
                             "callback_deadline_seconds more than 0")
        self.handler = handler
        self.origins = origins
        self.heartbeat_seconds = heartbeat_seconds
        self.callback_deadline_seconds = callback_deadline_seconds
        self.max_pending = max_pending
        self.clock = clock
        self._authorization = authorization
        self._concurrency = concurrency
        self._slots = asyncio.Semaphore(concurrency)  # handlers running
        self._sending = asyncio.Semaphore(concurrency)  # callbacks in flight
        self._tasks: set[asyncio.Task[None]] = set()  # accepted, not yet delivered
        self._pool: HttpPool | None = None

    def __repr__(self) -> str:
        return (f"<CallbackWorker pending={self.pending}/{self.max_pending} "
                f"auth={'set' if self._authorization else 'none'}>")

    @property
    def pending(self) -> int:
        """Launches accepted whose outcome is not delivered (or dropped) yet."""
        return len(self._tasks)

    async def lifespan(self, app: web.Application) -> AsyncIterator[None]:
        # as many requests per origin as the worker sends at once: a callback that got
        # its turn never waits for a connection slot
        self._pool = HttpPool(limit=self._concurrency, cap=MAX_ANSWER_BYTES)
        yield
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._pool.close()

    async def accept(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _refusal(401, "unauthorized", "this downstream needs hipq's credentials")
        if len(self._tasks) >= self.max_pending:
            return _refusal(503, "busy", f"{self.max_pending} launches pending; try later",
                            {"Retry-After": str(RETRY_AFTER_SECONDS)})
        try:
            launch = Launch.from_json(await request.json(), correlation_key=request.headers.get(
                "Hipq-Correlation-Key"))
        except (ValueError, RecursionError, BadLaunch) as exc:
            return _refusal(400, "bad_launch", f"{exc}"[:500])
        if launch.callback_url is None:
            return _refusal(400, "bad_launch", "the launch has no callback_url")
        target = self.origins.target(launch.callback_url)
        if target is None:
            log.warning("refused launch %r/%r: its callback URL is not hipq's signed "
                        "response route on a hipq origin this downstream was given",
                        launch.queue, launch.id, extra={"action": "callback_not_allowed"})
            return _refusal(403, "callback_not_allowed",
                            "the callback_url is not hipq's signed response route "
                            "(/v1/responses/{key}?sig=...) on a hipq origin this downstream "
                            "serves")
        task = asyncio.create_task(self._run(launch, target))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return web.Response(body=ACCEPTED_BODY, status=202, content_type="application/json")

    def _authorized(self, request: web.Request) -> bool:
        if self._authorization is None:
            return True
        given = request.headers.get("Authorization", "")
        try:
            raw = given.encode("utf-8", "surrogateescape")  # the bytes as they came
        except UnicodeEncodeError:
            return False
        return hmac.compare_digest(raw, self._authorization)

    async def _run(self, launch: Launch, url: URL) -> None:
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
        await self.deliver(url, encode_outcome(body),
                           f"{launch.queue}/{launch.id} (attempt {launch.attempt})")

    async def _heartbeats(self, url: URL, every: float) -> None:
        while True:
            await self.clock.sleep(every)
            try:
                await self._post(url, HEARTBEAT_BODY)
            except DELIVERY_ERRORS as exc:
                log.info("heartbeat not delivered (%s)", _reason(exc),
                         extra={"action": "heartbeat_error"})

    async def deliver(self, url: URL, body: bytes, what: str = "a job") -> None:
        """POST ``body`` (an encoded outcome) until hipq takes it (2xx), says it is
        too late (409) or refuses it for good, or ``callback_deadline_seconds`` pass."""
        give_up = self.clock.monotonic() + self.callback_deadline_seconds
        delay = FIRST_RETRY_SECONDS
        while (problem := await self._attempt(url, body, what)) is not None:
            left = give_up - self.clock.monotonic()
            if left <= 0:
                log.error("the outcome of %s: gave up after %gs without delivery (last: %s); "
                          "dropped", what, self.callback_deadline_seconds, problem,
                          extra={"action": "callback_expired"})
                return
            log.info("the outcome of %s not delivered (%s); again in %.1fs", what, problem,
                     min(delay, left), extra={"action": "callback_retry"})
            await self.clock.sleep(min(delay, left))
            delay = min(delay * 2, MAX_RETRY_SECONDS)

    async def _attempt(self, url: URL, body: bytes, what: str) -> str | None:
        """One POST of an outcome: None when there is nothing more to do, else why
        it should be sent again."""
        try:
            status = await self._post(url, body)
        except DELIVERY_ERRORS as exc:
            return _reason(exc)
        if status < 300 or status == 409:
            return None
        if 400 <= status < 500 and status not in RETRYABLE_4XX:
            log.error("the outcome of %s: refused with %s; dropped", what, status,
                      extra={"action": "callback_refused"})
            return None
        return f"answered {status}"

    async def _post(self, url: URL, body: bytes) -> int:
        """One POST (no redirect followed: a 3xx is an answer); its status."""
        assert self._pool is not None
        async with self._sending:
            answer = await self._pool.post(Endpoint.of(url), JSON_HEADERS, body,
                                           within=CALLBACK_TIMEOUT_SECONDS)
            return answer.status


def _refusal(status: int, code: str, message: str,
             headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status,
                             headers=headers)


def _reason(exc: BaseException) -> str:
    """An exception for a log line: an error may carry a whole URL (its signature)
    in its message, so any URL's query is cut."""
    text = _URL_QUERY.sub(r"\1?...", str(exc))
    return f"{type(exc).__name__}: {text}"[:300]


WORKER = web.AppKey("hipq_downstream_worker", CallbackWorker)

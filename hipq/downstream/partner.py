"""A fake partner API that enforces its own contract (SPEC 15, "The proof").

A real aiohttp server in its own process, for tests, ``hipq demo`` and the
benchmarks: hipq launches jobs to it over HTTP and it answers the way a strict
partner would. Run it as::

    python -m hipq.downstream.partner --port 0 --concurrency 2 --rate 10 --per-seconds 1

It prints one line, ``partner listening on http://HOST:PORT``, and serves until
SIGTERM or SIGINT (exit 0).

A launch is ``POST <any path>`` with hipq's JSON body (``id``, ``queue``,
``data``, ``attempt``, ``max_attempts``, ``correlation_key``, ``callback_url``).
Its **API key** is the value at ``--key-field`` (a dotted path into the body,
default ``data.api_key``; missing is the key ``""``). Per key:

- ``--concurrency C``: at most C launches in progress at once (sync: the request
  is open; callback: accepted and its callback not yet sent).
- ``--rate N --per-seconds P``: a fixed window that opens at the first accepted
  launch after the previous window ended and lasts P seconds; at most N accepted
  in it.
- Beyond either, the launch is refused and counts against neither. How:
  ``--refuse-as 429`` (HTTP 429), ``503`` (HTTP 503, always with ``Retry-After``)
  or ``callback`` (callback mode only: 202, then at once a callback
  ``{"status": "throttled", "retry_after_seconds": n}``, n omitted when none).
- ``--retry-after none|auto|SECONDS``: the ``Retry-After`` of a refusal: none,
  the whole seconds until the key's window ends (``auto``; "1" for a concurrency
  refusal), or a fixed number.
- ``--ratelimit-headers`` / ``--x-ratelimit-headers``: every launch answer
  carries ``RateLimit-Limit``, ``RateLimit-Remaining`` (left in the window) and
  ``RateLimit-Reset`` (whole seconds until the window ends, rounded up; 0 with
  no window open), or their ``X-RateLimit-*`` twins. Meaningful with ``--rate``.

An accepted launch takes ``--latency`` seconds (default 0.1). ``--mode sync``
(default) answers 200 ``{"ok": true}`` after it; ``--mode callback`` answers 202
at once and after the latency posts ``{"status": "succeeded", "result": {"ok":
true}}`` to ``callback_url``, trying a failed post a few times.

``GET /_partner/stats`` tells what it saw (``accepted``, ``refused``,
``max_in_flight``, ``max_in_flight_by_key``, ``in_flight`` and ``requests``:
``[arrival epoch time, key, status or "callback-throttled"]`` in arrival order);
``POST /_partner/reset`` clears the counters and the log (the windows and the
launches in progress stay). Neither counts as a launch.

:class:`PartnerProcess` starts one in a subprocess and talks to it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import os
import signal
import sys
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import aiohttp
from aiohttp import web

from hipq.clock import Clock, SystemClock

READY = "partner listening on "
STATS_PATH = "/_partner/stats"
RESET_PATH = "/_partner/reset"
CALLBACK_TRIES = 4
CALLBACK_PAUSE_SECONDS = 0.2
START_TIMEOUT_SECONDS = 15.0
SOURCE_ROOT = str(Path(__file__).resolve().parents[2])  # so the child runs this hipq too

Mode = Literal["sync", "callback"]
RefuseAs = Literal["429", "503", "callback"]
RetryAfter = Literal["none", "auto"] | int


@dataclass(frozen=True, slots=True)
class Contract:
    """What the partner promises and enforces (the command line, parsed)."""

    concurrency: int | None = None
    rate: int | None = None
    per_seconds: float = 1.0
    latency: float = 0.1
    mode: Mode = "sync"
    retry_after: RetryAfter = "none"
    ratelimit_headers: bool = False
    x_ratelimit_headers: bool = False
    refuse_as: RefuseAs = "429"
    key_field: str = "data.api_key"


@dataclass(slots=True)
class KeyState:
    in_flight: int = 0
    window_start: float | None = None  # monotonic; None: no window open yet
    used: int = 0


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: Literal["concurrency", "rate"]
    auto_retry_after: int  # whole seconds, the ``auto`` value


@dataclass(slots=True)
class Stats:
    accepted: int = 0
    refused: int = 0
    max_in_flight: int = 0
    max_in_flight_by_key: dict[str, int] = field(default_factory=dict)
    requests: list[tuple[float, str, int | str]] = field(default_factory=list)


def key_of(body: Any, path: str) -> str:
    """The value at a dotted ``path`` into ``body`` as a string ("" when missing)."""
    value = body
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return ""
        value = value[part]
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


class Partner:
    """The contract's state and the aiohttp handlers that enforce it. Admission
    is decided and recorded without an ``await`` in between, so it is exact."""

    def __init__(self, contract: Contract, clock: Clock | None = None) -> None:
        self.contract = contract
        self.clock = clock or SystemClock()
        self.keys: dict[str, KeyState] = collections.defaultdict(KeyState)
        self.stats = Stats()
        self.in_flight = 0
        self.session: aiohttp.ClientSession | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(STATS_PATH, self.handle_stats)
        app.router.add_post(RESET_PATH, self.handle_reset)
        app.router.add_post("/{tail:.*}", self.handle_launch)
        app.cleanup_ctx.append(self._lifetime)
        return app

    async def _lifetime(self, _app: web.Application) -> AsyncIterator[None]:
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        yield
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.session.close()

    # -- the contract -------------------------------------------------------

    def _window(self, state: KeyState, now: float) -> tuple[int, int]:
        """(left in the key's window, whole seconds until it ends), a window that
        has ended counting as none open: (N, 0)."""
        rate = self.contract.rate
        if rate is None:
            return 0, 0
        start = state.window_start
        if start is None or now >= start + self.contract.per_seconds:
            return rate, 0
        return rate - state.used, math.ceil(start + self.contract.per_seconds - now)

    def admit(self, key: str, now: float) -> Refusal | None:
        """Take a launch of ``key`` in (counted) or say why not (nothing counted)."""
        state = self.keys[key]
        left, reset = self._window(state, now)
        if self.contract.rate is not None and left <= 0:
            return Refusal("rate", reset)
        if self.contract.concurrency is not None and state.in_flight >= self.contract.concurrency:
            return Refusal("concurrency", 1)
        if self.contract.rate is not None:
            if reset == 0:  # the previous window ended: this launch opens the next
                state.window_start, state.used = now, 0
            state.used += 1
        state.in_flight += 1
        self.in_flight += 1
        self.stats.accepted += 1
        self.stats.max_in_flight = max(self.stats.max_in_flight, self.in_flight)
        by_key = self.stats.max_in_flight_by_key
        by_key[key] = max(by_key.get(key, 0), state.in_flight)
        return None

    def release(self, key: str) -> None:
        self.keys[key].in_flight -= 1
        self.in_flight -= 1

    def retry_after(self, refusal: Refusal) -> int | None:
        setting = self.contract.retry_after
        if setting == "auto" or (setting == "none" and self.contract.refuse_as == "503"):
            return refusal.auto_retry_after
        return None if setting == "none" else int(setting)

    def rate_headers(self, key: str, now: float) -> dict[str, str]:
        rate = self.contract.rate
        if rate is None:
            return {}
        left, reset = self._window(self.keys[key], now)
        values = {"Limit": str(rate), "Remaining": str(left), "Reset": str(reset)}
        headers: dict[str, str] = {}
        if self.contract.ratelimit_headers:
            headers |= {f"RateLimit-{name}": value for name, value in values.items()}
        if self.contract.x_ratelimit_headers:
            headers |= {f"X-RateLimit-{name}": value for name, value in values.items()}
        return headers

    # -- handlers -----------------------------------------------------------

    async def handle_launch(self, request: web.Request) -> web.Response:
        arrived, now = self.clock.now().timestamp(), self.clock.monotonic()
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "the body is not JSON"}, status=400)
        key = key_of(body, self.contract.key_field)
        callback_url = body.get("callback_url") if isinstance(body, dict) else None
        if self.contract.mode == "callback" and not isinstance(callback_url, str):
            self.stats.requests.append((arrived, key, 400))
            return web.json_response({"error": "callback_url is missing"}, status=400)
        refusal = self.admit(key, now)
        if refusal is not None:
            return self._refuse(refusal, key, arrived, callback_url, self.rate_headers(key, now))
        headers = self.rate_headers(key, now)
        if self.contract.mode == "callback":
            assert isinstance(callback_url, str)
            self.stats.requests.append((arrived, key, 202))
            self._spawn(self._finish_later(key, callback_url))
            return web.json_response({"accepted": True}, status=202, headers=headers)
        self.stats.requests.append((arrived, key, 200))
        try:
            await self.clock.sleep(self.contract.latency)
        finally:
            self.release(key)
        return web.json_response({"ok": True}, headers=headers)

    def _refuse(self, refusal: Refusal, key: str, arrived: float, callback_url: str | None,
                headers: dict[str, str]) -> web.Response:
        self.stats.refused += 1
        seconds = self.retry_after(refusal)
        if self.contract.refuse_as == "callback":
            assert callback_url is not None
            self.stats.requests.append((arrived, key, "callback-throttled"))
            throttled: dict[str, Any] = {"status": "throttled"}
            if seconds is not None:
                throttled["retry_after_seconds"] = seconds
            self._spawn(self._post_callback(callback_url, throttled))
            return web.json_response({"accepted": True}, status=202, headers=headers)
        status = int(self.contract.refuse_as)
        self.stats.requests.append((arrived, key, status))
        if seconds is not None:
            headers["Retry-After"] = str(seconds)
        return web.json_response({"error": "throttled", "reason": refusal.reason},
                                 status=status, headers=headers)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _finish_later(self, key: str, callback_url: str) -> None:
        try:
            await self.clock.sleep(self.contract.latency)
            await self._post_callback(callback_url,
                                      {"status": "succeeded", "result": {"ok": True}})
        finally:
            self.release(key)

    async def _post_callback(self, url: str, outcome: dict[str, Any]) -> None:
        """POST ``outcome`` to ``url``; a connection error, 429 or 5xx is tried
        again a few times, briefly; any other answer ends it."""
        assert self.session is not None
        for attempt in range(CALLBACK_TRIES):
            if attempt:
                await self.clock.sleep(CALLBACK_PAUSE_SECONDS * attempt)
            try:
                async with self.session.post(url, json=outcome) as response:
                    if response.status != 429 and response.status < 500:
                        return
            except (TimeoutError, aiohttp.ClientError):
                continue

    async def handle_stats(self, _request: web.Request) -> web.Response:
        stats = self.stats
        return web.json_response({
            "accepted": stats.accepted, "refused": stats.refused,
            "max_in_flight": stats.max_in_flight,
            "max_in_flight_by_key": stats.max_in_flight_by_key,
            "in_flight": self.in_flight,
            "requests": stats.requests})

    async def handle_reset(self, _request: web.Request) -> web.Response:
        self.stats = Stats()
        return web.json_response({"ok": True})


# -- the process --------------------------------------------------------------


def _retry_after(value: str) -> RetryAfter:
    if value == "none":
        return "none"
    if value == "auto":
        return "auto"
    try:
        seconds = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("none, auto or whole seconds") from None
    if seconds < 0:
        raise argparse.ArgumentTypeError("seconds must not be negative")
    return seconds


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def parse_args(argv: Sequence[str] | None = None) -> tuple[Contract, str, int]:
    parser = argparse.ArgumentParser(
        prog="python -m hipq.downstream.partner",
        description="A fake partner API that enforces its own contract per API key.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--concurrency", type=_positive_int, metavar="C",
                        help="at most C launches of a key in progress at once")
    parser.add_argument("--rate", type=_positive_int, metavar="N",
                        help="at most N accepted launches of a key per window")
    parser.add_argument("--per-seconds", type=float, default=1.0, metavar="P",
                        help="the rate window's length (default 1)")
    parser.add_argument("--latency", type=float, default=0.1, metavar="SECONDS",
                        help="how long an accepted launch takes (default 0.1)")
    parser.add_argument("--mode", choices=["sync", "callback"], default="sync",
                        help="sync: 200 after the latency; callback: 202, then a callback")
    parser.add_argument("--retry-after", type=_retry_after, default="none",
                        metavar="none|auto|SECONDS",
                        help="the Retry-After of a refusal (default none)")
    parser.add_argument("--ratelimit-headers", action="store_true",
                        help="RateLimit-Limit/Remaining/Reset on every launch answer")
    parser.add_argument("--x-ratelimit-headers", action="store_true",
                        help="X-RateLimit-Limit/Remaining/Reset on every launch answer")
    parser.add_argument("--refuse-as", choices=["429", "503", "callback"], default="429",
                        help="HTTP 429, HTTP 503 with Retry-After, or a throttled callback")
    parser.add_argument("--key-field", default="data.api_key", metavar="DOTTED.PATH",
                        help="where the API key is in the body (default data.api_key)")
    args = parser.parse_args(argv)
    if args.refuse_as == "callback" and args.mode != "callback":
        parser.error("--refuse-as callback needs --mode callback")
    if args.per_seconds <= 0 or args.latency < 0:
        parser.error("--per-seconds must be positive and --latency not negative")
    contract = Contract(
        concurrency=args.concurrency, rate=args.rate, per_seconds=args.per_seconds,
        latency=args.latency, mode=args.mode, retry_after=args.retry_after,
        ratelimit_headers=args.ratelimit_headers, x_ratelimit_headers=args.x_ratelimit_headers,
        refuse_as=args.refuse_as, key_field=args.key_field)
    return contract, args.host, args.port


async def serve(contract: Contract, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT, having announced the address on stdout."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):  # before the line: it invites signals
        loop.add_signal_handler(signum, stop.set)
    runner = web.AppRunner(Partner(contract).app(), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        sys.stdout.write(f"{READY}http://{host}:{bound}\n")
        sys.stdout.flush()
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    contract, host, port = parse_args(argv)
    asyncio.run(serve(contract, host, port))
    return 0


class PartnerError(RuntimeError):
    """The partner process did not start (its stderr is in the message)."""


class PartnerProcess:
    """A partner in a subprocess, for tests, ``hipq demo`` and benchmarks::

        async with await PartnerProcess.start("--concurrency", "2") as partner:
            ...  # launch to partner.url
            stats = await partner.stats()
    """

    def __init__(self, process: asyncio.subprocess.Process, url: str) -> None:
        self.process = process
        self.url = url
        self._stderr: collections.deque[str] = collections.deque(maxlen=200)
        self._drain = asyncio.create_task(self._read_stderr())
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    async def start(cls, *args: str) -> PartnerProcess:
        """Spawn ``python -m hipq.downstream.partner --port 0 *args`` and wait
        (at most START_TIMEOUT_SECONDS) for its "listening" line."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [SOURCE_ROOT, env.get("PYTHONPATH")]))
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "hipq.downstream.partner", "--port", "0", *args,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env)
        assert process.stdout is not None
        assert process.stderr is not None
        try:
            async with asyncio.timeout(START_TIMEOUT_SECONDS):
                line = (await process.stdout.readline()).decode()
        except TimeoutError:
            process.kill()
            await process.wait()
            line = ""
        if not line.startswith(READY):
            if process.returncode is None:
                process.kill()
            code = await process.wait()
            stderr = (await process.stderr.read()).decode(errors="replace")
            raise PartnerError(f"the partner did not start (exit {code}, args {list(args)}): "
                               f"{line}{stderr}".rstrip())
        return cls(process, line[len(READY):].strip())

    async def _read_stderr(self) -> None:
        """Keep the tail of stderr (a full pipe would block the child)."""
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            self._stderr.append(raw.decode(errors="replace"))

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        return self._session

    async def stats(self) -> dict[str, Any]:
        async with self._client().get(self.url + STATS_PATH) as response:
            response.raise_for_status()
            stats: dict[str, Any] = await response.json()
            return stats

    async def reset(self) -> None:
        async with self._client().post(self.url + RESET_PATH) as response:
            response.raise_for_status()

    async def stop(self, kill_after: float = 5.0) -> int:
        """SIGTERM, wait (SIGKILL after ``kill_after`` s): -> the exit code."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), kill_after)
            except TimeoutError:
                self.process.kill()
        code = await self.process.wait()
        with contextlib.suppress(asyncio.CancelledError):
            await self._drain
        return code

    async def __aenter__(self) -> PartnerProcess:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()


if __name__ == "__main__":
    sys.exit(main())

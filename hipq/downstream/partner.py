"""A fake partner API that enforces its own contract (docs/throttling.md, "The
partner's word").

A real aiohttp server in its own process, for tests, ``hipq demo`` and the
benchmarks: hipq launches jobs to it over HTTP and it answers the way a strict
partner (an LLM or payment provider) would. Run it as::

    python -m hipq.downstream.partner --port 0 --concurrency 2 --rate 10 --per-seconds 1
    python -m hipq.downstream.partner --limit requests:50/1 --limit cost:2000/1 \\
        --limit requests:10000/86400 --cost-field data.max_tokens --usage-factor 0.3-1 \\
        --window token-bucket --headers openai

It prints one line, ``partner listening on http://HOST:PORT``, and serves until
SIGTERM or SIGINT (exit 0).

A launch is ``POST <any path>`` with hipq's JSON body (``id``, ``queue``,
``data``, ``attempt``, ``max_attempts``, ``correlation_key``, ``callback_url``).
Its **API key** is the value at ``--key-field`` (a dotted path into the body,
default ``data.api_key``; missing is the key ``""``). Each key has its own
buckets and its own count of launches in progress:

- ``--concurrency C``: at most C launches in progress at once (sync: the request
  is open; callback: accepted and its callback not yet sent).
- ``--limit UNIT:AMOUNT/SECONDS`` (repeatable; ``requests:50/1``,
  ``cost:90000/60``, ``requests:10000/86400``): a bucket of AMOUNT requests or
  AMOUNT cost per SECONDS, named ``UNIT-SECONDSs`` (``requests-60s``) in headers
  and stats. ``--rate N --per-seconds P`` is ``--limit requests:N/P``.
- ``--window fixed|token-bucket``: the buckets' shape
  (hipq/downstream/partner_buckets.py). ``fixed`` (default): a window opens at
  the first launch after the previous one ended and lasts SECONDS, at most AMOUNT
  taken in it. ``token-bucket``: AMOUNT, full at first, refilled continuously to
  full over SECONDS (as OpenAI and Anthropic describe theirs).
- **Cost.** A launch's estimate is the number at ``--cost-field`` (a dotted path,
  ``data.max_tokens``; missing, or not a number from 0 to 10^15:
  ``--cost-default``, default 1). Admission takes one request from every
  requests bucket and the estimate from every cost bucket, or nothing when one
  lacks room (a launch larger than a whole bucket goes when that bucket is
  untouched, alone). When the launch ends its **actual cost**, the estimate
  times a factor drawn uniformly from ``--usage-factor LOW-HIGH`` (default
  ``1-1``; ``--seed N`` repeats the draws; rounded to a whole number when the
  estimate is whole, as tokens are), replaces the estimate in the cost buckets,
  as a provider bills the tokens really used (it may overdraw a bucket; then
  nothing more fits until it recovers).
- Beyond a bucket or the concurrency, the launch is refused and takes nothing.
  How: ``--refuse-as 429`` (HTTP 429), ``503`` (HTTP 503, always with
  ``Retry-After``) or ``callback`` (callback mode only: 202, then at once a
  callback ``{"status": "throttled", "retry_after_seconds": n}``, n omitted when
  none). A refused answer's body says why: ``{"error": "throttled", "reason":
  "rate" | "cost" | "concurrency", "buckets": [names lacking room]}``.
- ``--retry-after none|auto|SECONDS``: the ``Retry-After`` of a refusal: none,
  the whole seconds until every bucket that lacked room has room (``auto``; "1"
  for a concurrency refusal), or a fixed number.
- ``--headers FAMILY`` (repeatable; hipq/downstream/partner_headers.py): every
  launch answer, accepted or refused, describes the key's buckets in the
  family's fields, as the vendor documents them: ``ietf`` (``RateLimit-Policy:
  "requests-1s";q=50;w=1`` and ``RateLimit: "requests-1s";r=49;t=1``, one member
  per bucket, a cost bucket's policy with ``qu="cost"``), ``ietf-older``
  (``RateLimit-Limit``/``-Remaining``/``-Reset``),
  ``x-ratelimit`` (``X-RateLimit-*``; both of the tightest requests bucket,
  resets in whole seconds, 0 with no window open), ``openai``
  (``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``, resets as Go
  durations, ``6m0s``), ``anthropic``
  (``anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}``, RFC 3339
  times), or ``none`` (default). ``--ratelimit-headers`` is ``--headers
  ietf-older`` and ``--x-ratelimit-headers`` is ``--headers x-ratelimit``.

An accepted launch takes ``--latency`` seconds (default 0.1). ``--mode sync``
(default) answers 200 ``{"ok": true}`` after it; ``--mode callback`` answers 202
at once and after the latency posts ``{"status": "succeeded", "result": {"ok":
true}}`` to ``callback_url``, trying a failed post a few times. When the partner
counts cost (a ``cost:`` limit, ``--cost-field`` or ``--usage-header``) both carry
``"usage": {"cost": <actual>}``, and ``--usage-header NAME`` (``x-usage-tokens``)
puts the actual cost in that header of the sync answer and of the callback's post.
A sync answer's budget headers describe the buckets when it is sent (the cost
settled); a 202's when the launch was admitted.

``GET /_partner/stats`` tells what it saw (``accepted``, ``refused``,
``max_in_flight``, ``max_in_flight_by_key``, ``in_flight`` and ``requests``:
``[arrival epoch time, key, status or "callback-throttled"]`` in arrival order),
and per key that launched, ``keys``: ``{key: {"accepted", "refused", "cost",
"buckets": {name: {"unit", "limit", "per_seconds", "accepted", "refused" (for
lack of room in that bucket), "cost" (the actual cost of the accepted launches
that ended), "max_used" (the most the bucket ever held, as it counts: a fixed
window's sum, a token bucket's shortfall from full; above ``limit`` only when
actual costs overdrew it or a launch larger than the bucket went alone)}}}}``,
left out until a key launches. ``POST /_partner/reset`` clears the counters and
the log (the buckets and the launches in progress stay). Neither counts as a
launch.

:class:`Partner` takes a :class:`~hipq.clock.Clock` (tests pass a fake one and
serve :meth:`Partner.app` in-process); :class:`PartnerProcess` starts one in a
subprocess and talks to it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import os
import random
import re
import signal
import sys
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import aiohttp
from aiohttp import web

from hipq.clock import Clock, SystemClock
from hipq.downstream.partner_buckets import SHAPES, Limit, Shape
from hipq.downstream.partner_headers import FAMILIES, Family, amount, write
from hipq.downstream.partner_ledger import Admission, Ledger, Refusal, Stats

READY = "partner listening on "
STATS_PATH = "/_partner/stats"
RESET_PATH = "/_partner/reset"
CALLBACK_TRIES = 4
CALLBACK_PAUSE_SECONDS = 0.2
START_TIMEOUT_SECONDS = 15.0
MAX_ESTIMATE = 10**15  # a larger cost estimate counts as missing
SOURCE_ROOT = str(Path(__file__).resolve().parents[2])  # so the child runs this hipq too

Mode = Literal["sync", "callback"]
RefuseAs = Literal["429", "503", "callback"]
RetryAfter = Literal["none", "auto"] | int
_HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}", re.ASCII)


@dataclass(frozen=True, slots=True)
class Contract:
    """What the partner promises and enforces (the command line, parsed)."""

    concurrency: int | None = None
    limits: tuple[Limit, ...] = ()
    window: Shape = "fixed"
    latency: float = 0.1
    mode: Mode = "sync"
    retry_after: RetryAfter = "none"
    headers: tuple[Family, ...] = ()
    refuse_as: RefuseAs = "429"
    key_field: str = "data.api_key"
    cost_field: str | None = None
    cost_default: float = 1.0
    usage_factor: tuple[float, float] = (1.0, 1.0)
    usage_header: str | None = None
    seed: int | None = None

    @property
    def counts_cost(self) -> bool:
        """Whether answers report usage (a cost bucket, a cost field or a header)."""
        return (any(limit.unit == "cost" for limit in self.limits)
                or self.cost_field is not None or self.usage_header is not None)


_MISSING = object()


def value_at(body: Any, path: str) -> Any:
    """The value at a dotted ``path`` into ``body``, or ``_MISSING``."""
    value = body
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def key_of(body: Any, path: str) -> str:
    """The value at a dotted ``path`` into ``body`` as a string ("" when missing)."""
    value = value_at(body, path)
    if value is _MISSING or value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def estimate_of(body: Any, path: str | None, default: float) -> float:
    """The cost estimate at ``path``: a number from 0 to ``MAX_ESTIMATE``, else
    ``default``."""
    value = _MISSING if path is None else value_at(body, path)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return float(value) if 0 <= value <= MAX_ESTIMATE else default


class Partner:
    """The contract's state (a :class:`~hipq.downstream.partner_ledger.Ledger`)
    and the aiohttp handlers that enforce it."""

    def __init__(self, contract: Contract, clock: Clock | None = None) -> None:
        self.contract = contract
        self.clock = clock or SystemClock()
        self.ledger = Ledger(contract.limits, contract.window, contract.concurrency)
        self.random = random.Random(contract.seed)
        self.session: aiohttp.ClientSession | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    @property
    def stats(self) -> Stats:
        return self.ledger.stats

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

    def actual_cost(self, estimate: float) -> float:
        """The estimate times a factor drawn from ``--usage-factor`` (whole when the
        estimate is)."""
        low, high = self.contract.usage_factor
        actual = estimate * (low if low == high else self.random.uniform(low, high))
        return float(round(actual)) if estimate == int(estimate) else actual

    def _end(self, admission: Admission) -> float:
        """Settle a launch that ended: -> its actual cost."""
        actual = self.actual_cost(admission.estimate)
        self.ledger.settle(admission, actual, self.clock.monotonic())
        return actual

    def retry_after(self, refusal: Refusal) -> int | None:
        setting = self.contract.retry_after
        if setting == "auto" or (setting == "none" and self.contract.refuse_as == "503"):
            return refusal.auto_retry_after
        return None if setting == "none" else int(setting)

    def budget_headers(self, key: str, now: float) -> dict[str, str]:
        """The ``--headers`` families' fields for ``key``'s buckets at ``now``."""
        if not self.contract.headers:
            return {}
        return write(self.contract.headers, self.ledger.views(key, now), self.clock.now())

    def _usage(self, actual: float) -> tuple[dict[str, Any], dict[str, str]]:
        """(the body's ``usage`` member, the usage header) of an ended launch."""
        if not self.contract.counts_cost:
            return {}, {}
        cost = int(actual) if actual == int(actual) else actual
        header = self.contract.usage_header
        return {"usage": {"cost": cost}}, ({header: amount(actual)} if header else {})

    # -- handlers -----------------------------------------------------------

    async def handle_launch(self, request: web.Request) -> web.Response:
        arrived, now = self.clock.now().timestamp(), self.clock.monotonic()
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "the body is not JSON"}, status=400)
        contract = self.contract
        key = key_of(body, contract.key_field)
        callback_url = body.get("callback_url") if isinstance(body, dict) else None
        if contract.mode == "callback" and not isinstance(callback_url, str):
            self.stats.requests.append((arrived, key, 400))
            return web.json_response({"error": "callback_url is missing"}, status=400)
        estimate = estimate_of(body, contract.cost_field, contract.cost_default)
        admitted = self.ledger.admit(key, estimate, now)
        if isinstance(admitted, Refusal):
            return self._refuse(admitted, key, arrived, callback_url,
                                self.budget_headers(key, now))
        if contract.mode == "callback":
            assert isinstance(callback_url, str)
            self.stats.requests.append((arrived, key, 202))
            self._spawn(self._finish_later(admitted, callback_url))
            return web.json_response({"accepted": True}, status=202,
                                     headers=self.budget_headers(key, now))
        self.stats.requests.append((arrived, key, 200))
        try:
            await self.clock.sleep(contract.latency)
        finally:
            actual = self._end(admitted)
            self.ledger.release(admitted)
        usage, usage_header = self._usage(actual)
        headers = self.budget_headers(key, self.clock.monotonic()) | usage_header
        return web.json_response({"ok": True} | usage, headers=headers)

    def _refuse(self, refusal: Refusal, key: str, arrived: float, callback_url: str | None,
                headers: dict[str, str]) -> web.Response:
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
        return web.json_response(
            {"error": "throttled", "reason": refusal.reason, "buckets": list(refusal.buckets)},
            status=status, headers=headers)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _finish_later(self, admission: Admission, callback_url: str) -> None:
        try:
            await self.clock.sleep(self.contract.latency)
            usage, usage_header = self._usage(self._end(admission))
            await self._post_callback(
                callback_url, {"status": "succeeded", "result": {"ok": True}} | usage,
                usage_header)
        finally:
            self.ledger.release(admission)

    async def _post_callback(self, url: str, outcome: dict[str, Any],
                             headers: dict[str, str] | None = None) -> None:
        """POST ``outcome`` to ``url``; a connection error, 429 or 5xx is tried
        again a few times, briefly; any other answer ends it."""
        assert self.session is not None
        for attempt in range(CALLBACK_TRIES):
            if attempt:
                await self.clock.sleep(CALLBACK_PAUSE_SECONDS * attempt)
            try:
                async with self.session.post(url, json=outcome, headers=headers) as response:
                    if response.status != 429 and response.status < 500:
                        return
            except (TimeoutError, aiohttp.ClientError):
                continue

    async def handle_stats(self, _request: web.Request) -> web.Response:
        return web.json_response(self.ledger.stats_json())

    async def handle_reset(self, _request: web.Request) -> web.Response:
        self.ledger.reset_stats()
        return web.json_response({"ok": True})


# -- the command line ---------------------------------------------------------


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


def _limit(value: str) -> Limit:
    try:
        return Limit.parse(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _not_negative(value: str) -> float:
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError("a finite number not below zero")
    return number


def _factor(value: str) -> tuple[float, float]:
    low_text, _, high_text = value.partition("-")
    low = _not_negative(low_text)
    high = _not_negative(high_text) if high_text else low
    if high < low:
        raise argparse.ArgumentTypeError("LOW-HIGH with LOW not above HIGH (0.5-1.2)")
    return low, high


def _header_name(value: str) -> str:
    if not _HEADER_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError("letters, digits and '-'")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hipq.downstream.partner",
        description="A fake partner API that enforces its own contract per API key.")
    add = parser.add_argument
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=0, help="0: any free port")
    add("--concurrency", type=_positive_int, metavar="C",
        help="at most C launches of a key in progress at once")
    add("--limit", type=_limit, action="append", default=[], metavar="UNIT:AMOUNT/SECONDS",
        help="a bucket per key: requests:50/1, cost:90000/60 (repeatable)")
    add("--rate", type=_positive_int, metavar="N", help="--limit requests:N/P")
    add("--per-seconds", type=float, default=1.0, metavar="P",
        help="the window of --rate (default 1)")
    add("--window", choices=SHAPES, default="fixed",
        help="the buckets' shape: a fixed window per key, or a token bucket")
    add("--cost-field", metavar="DOTTED.PATH", help="a launch's cost estimate in the body")
    add("--cost-default", type=_not_negative, default=1.0, metavar="COST",
        help="the estimate when the field is missing (default 1)")
    add("--usage-factor", type=_factor, default=(1.0, 1.0), metavar="LOW-HIGH",
        help="actual cost = estimate x a factor drawn uniformly (default 1-1)")
    add("--usage-header", type=_header_name, metavar="NAME",
        help="the answer's header carrying the actual cost (x-usage-tokens)")
    add("--seed", type=int, help="repeatable draws of the usage factor")
    add("--latency", type=float, default=0.1, metavar="SECONDS",
        help="how long an accepted launch takes (default 0.1)")
    add("--mode", choices=["sync", "callback"], default="sync",
        help="sync: 200 after the latency; callback: 202, then a callback")
    add("--retry-after", type=_retry_after, default="none", metavar="none|auto|SECONDS",
        help="the Retry-After of a refusal (default none)")
    add("--headers", choices=("none", *FAMILIES), action="append", default=[],
        help="the budget headers on every launch answer (repeatable; default none)")
    add("--ratelimit-headers", action="store_true", help="--headers ietf-older")
    add("--x-ratelimit-headers", action="store_true", help="--headers x-ratelimit")
    add("--refuse-as", choices=["429", "503", "callback"], default="429",
        help="HTTP 429, HTTP 503 with Retry-After, or a throttled callback")
    add("--key-field", default="data.api_key", metavar="DOTTED.PATH",
        help="where the API key is in the body (default data.api_key)")
    return parser


def _families(args: argparse.Namespace) -> tuple[Family, ...]:
    chosen = [name for name in args.headers if name != "none"]
    chosen += ["ietf-older"] * args.ratelimit_headers + ["x-ratelimit"] * args.x_ratelimit_headers
    return tuple(dict.fromkeys(chosen))


def parse_args(argv: Sequence[str] | None = None) -> tuple[Contract, str, int]:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.refuse_as == "callback" and args.mode != "callback":
        parser.error("--refuse-as callback needs --mode callback")
    if args.per_seconds <= 0 or args.latency < 0:
        parser.error("--per-seconds must be positive and --latency not negative")
    limits = list(args.limit)
    if args.rate is not None:
        limits.append(Limit("requests", args.rate, args.per_seconds))
    names = [limit.name for limit in limits]
    if len(set(names)) < len(names):
        parser.error(f"two buckets of one unit and window: {names}")
    contract = Contract(
        concurrency=args.concurrency, limits=tuple(limits), window=args.window,
        latency=args.latency, mode=args.mode, retry_after=args.retry_after,
        headers=_families(args), refuse_as=args.refuse_as, key_field=args.key_field,
        cost_field=args.cost_field, cost_default=args.cost_default,
        usage_factor=args.usage_factor, usage_header=args.usage_header, seed=args.seed)
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

"""Fixtures for the HTTP API tests: an in-process daemon serving on 127.0.0.1 (port
0), a real downstream aiohttp server on 127.0.0.1, and a small HTTP client."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from hipq.clock import Clock
from hipq.config import Settings
from hipq.daemon import Daemon

ADMIN = "admin-token-0123456789"
PRODUCER = "producer-token-0123456789"
READER = "reader-token-0123456789"
SIGNING_KEY = "test-signing-key-0123456789abcdefghij"
TOKENS = [{"token": ADMIN, "role": "admin"}, {"token": PRODUCER, "role": "producer"},
          {"token": READER, "role": "reader"}]

Reply = Callable[[dict[str, Any]], Awaitable[tuple[int, Any]]]


@dataclass
class Downstream:
    """A downstream service: records every launch POST; ``reply`` decides the answer
    (default 202 accepted)."""

    url: str = ""
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    reply: Reply | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.received.append(body)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.headers.append({**request.headers, "X-Peer-Port": str(peer[1] if peer else "")})
        self.arrived.set()
        status, answer = (202, {"ok": True}) if self.reply is None else await self.reply(body)
        if isinstance(answer, str):
            return web.Response(status=status, text=answer)
        return web.json_response(answer, status=status)

    async def wait_for(self, count: int, within: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + within
        while len(self.received) < count:
            self.arrived.clear()
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"only {len(self.received)} of {count} launches arrived"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), remaining)
        return self.received


@pytest.fixture
async def downstream() -> AsyncIterator[Downstream]:
    ds = Downstream()
    app = web.Application()
    app.router.add_post("/{tail:.*}", ds.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    ds.url = f"http://127.0.0.1:{port}"
    yield ds
    await runner.cleanup()


@dataclass
class Api:
    """A client of a live daemon's API."""

    base: str
    session: aiohttp.ClientSession
    token: str | None = ADMIN

    async def call(self, method: str, path: str, body: Any = None, *, token: str | None = "",
                   raw: bytes | None = None,
                   headers: dict[str, str] | None = None) -> tuple[int, Any]:
        token = self.token if token == "" else token
        sent = dict(headers or {})
        if token:
            sent["Authorization"] = f"Bearer {token}"
        url = path if path.startswith("http") else self.base + path
        kwargs: dict[str, Any] = {"headers": sent}
        if raw is not None:
            kwargs["data"] = raw
        elif body is not None:
            kwargs["json"] = body
        async with self.session.request(method, url, **kwargs) as answer:
            text = await answer.text()
            try:
                return answer.status, await answer.json(content_type=None)
            except ValueError:
                return answer.status, text

    async def job(self, queue: str, job_id: str) -> dict[str, Any]:
        status, body = await self.call("GET", f"/v1/jobs/{queue}/{job_id}")
        assert status == 200, body
        return body  # type: ignore[no-any-return]

    async def wait_job(self, queue: str, job_id: str, *statuses: str,
                       within: float = 15.0, check: Callable[[dict[str, Any]], bool]
                       | None = None) -> dict[str, Any]:
        """Poll the job until its status is one of ``statuses`` (bounded)."""
        deadline, pauses = time.monotonic() + within, poll_pauses()
        while True:
            job = await self.job(queue, job_id)
            if job["status"] in statuses and (check is None or check(job)):
                return job
            assert time.monotonic() < deadline, f"job stuck: {job}"
            await asyncio.sleep(next(pauses))  # polling the API; there is no event to wait on


def poll_pauses(first: float = 0.01, longest: float = 0.1) -> Iterator[float]:
    """The pauses of a bounded poll: short at first (most waits end within a tick or
    two), a third longer each time up to ``longest``. A fixed 20 ms poll of a job
    that takes a second made 50 requests of the daemon, each a read of its database:
    with the suite on several workers that CPU is the other tests' time."""
    pause = first
    while True:
        yield pause
        pause = min(pause * 4 / 3, longest)


@dataclass
class Live:
    daemon: Daemon
    api: Api
    stop: asyncio.Event
    task: asyncio.Task[None]


def settings_for(db_url: str, **extra: Any) -> Settings:
    raw: dict[str, Any] = {
        "database": {"url": db_url},
        # counts fresh on every read (tests check them right after a change); the
        # 2 s default has its own test (tests/api/test_hostile.py)
        "api": {"host": "127.0.0.1", "port": 0, "tokens": TOKENS,
                "stats_max_age_seconds": 0},
        "reconcile": {"interval_seconds": 0.2, "lease_seconds": 30},
        "signing_key": SIGNING_KEY,
        "logging": {"level": "INFO"},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return Settings.model_validate(raw)


LiveFactory = Callable[..., Awaitable[Live]]


@pytest.fixture
async def live(db_url: str) -> AsyncIterator[LiveFactory]:
    """Start an in-process daemon: ``await live(clock=..., **settings)``."""
    started: list[Live] = []
    session = aiohttp.ClientSession()

    async def start(*, clock: Clock | None = None, **extra: Any) -> Live:
        if clock is not None:  # the tick driver's debounce sleeps on the clock: a fake
            # clock would move by it at every wake-up; under one, ticks are not debounced
            extra["reconcile"] = {"debounce_seconds": 0, **extra.get("reconcile", {})}
        daemon = Daemon(settings_for(db_url, **extra), clock=clock)
        stop, ready = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(daemon.run(stop=stop, ready=ready))
        waiter = asyncio.create_task(ready.wait())
        done, _ = await asyncio.wait({task, waiter}, timeout=30,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiter.cancel()
            task.result()
        assert waiter in done, "the daemon did not start"
        item = Live(daemon=daemon, api=Api(f"http://127.0.0.1:{daemon.api_port}", session),
                    stop=stop, task=task)
        started.append(item)
        return item

    yield start
    for item in started:
        item.stop.set()
        await asyncio.wait_for(item.task, 30)
    await session.close()


def http_queue(queue_id: str, url: str, **extra: Any) -> dict[str, Any]:
    """A queue body for ``POST /v1/jobs`` whose target is the downstream."""
    target = {"kind": "http", "url": url + "/v1/jobs/{queue}/{id}", "mode": "callback",
              "timeout_seconds": 5, **extra.pop("target", {})}
    return {"id": queue_id, "attempts": 3, "target": target,
            "retry": {"strategy": "fixed", "delay_seconds": 0.05}, **extra}


async def expire_many(api: Api, queue: str, count: int) -> None:
    """Enqueue ``count`` jobs that expire at once, and wait until all are archived."""
    past = "2020-01-01T00:00:00Z"
    jobs = [{"id": f"j{i:04d}", "expires_at": past} for i in range(count)]
    for start in range(0, count, 250):  # several calls: several finished_at values
        status, body = await api.call("POST", f"/v1/jobs/{queue}/batch",
                                      {"jobs": jobs[start:start + 250]})
        assert status == 200, body
    deadline, pauses = time.monotonic() + 30, poll_pauses()
    while True:
        status, body = await api.call("GET", f"/v1/jobs/{queue}")
        assert status == 200, body
        if body["stats"] is None or body["stats"]["queued"] == 0:
            return
        assert time.monotonic() < deadline, body
        await asyncio.sleep(next(pauses))  # polling the API; there is no event to wait on


async def archived_ids(api: Api, query: str) -> list[str]:
    """Every archived job id that ``GET /v1/archived-jobs?<query>`` pages through."""
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(10_000):
        status, page = await api.call(
            "GET", f"/v1/archived-jobs?{query}" + (f"&cursor={cursor}" if cursor else ""))
        assert status == 200, page
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("pagination never ended")

"""A cluster of real ``hipq run`` processes on one PostgreSQL database, and a
downstream HTTP service in the test process (callback mode): the parts of the
scale-out tests and of ``bench/chaos.py``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import yaml
from aiohttp import web

REPO = Path(__file__).resolve().parents[2]


def with_database(server_url: str, database: str) -> tuple[str, str]:
    """(asyncpg URL, SQLAlchemy URL) of ``database`` on the server of ``server_url``."""
    base = server_url.rsplit("/", 1)[0]
    scheme, rest = base.split("://", 1)
    scheme = "postgresql" if scheme.startswith("postgres") else scheme
    return f"{scheme}://{rest}/{database}", f"{scheme}+asyncpg://{rest}/{database}"


@contextlib.asynccontextmanager
async def empty_database(server_url: str, prefix: str = "hipq_scale") -> AsyncIterator[
        tuple[str, str]]:
    """A new, empty (unmigrated) database; dropped afterwards."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    try:
        yield with_database(server_url, name)
    finally:
        admin = await asyncpg.connect(server_url)
        try:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await admin.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_queue(queue_id: str, downstream_url: str, **extra: Any) -> dict[str, Any]:
    target = {"kind": "http", "url": downstream_url + "/launch/{queue}/{id}",
              "mode": "callback", "timeout_seconds": 5}
    return {"id": queue_id, "attempts": 3, "target": target,
            "retry": {"strategy": "fixed", "delay_seconds": 0.05}, **extra}


@dataclass
class Daemon:
    number: int
    port: int
    config: Path
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Cluster:
    """``hipq run`` processes sharing one database (``url``: SQLAlchemy's)."""

    url: str
    pg: str  # the same database, as asyncpg takes it
    workdir: Path
    queues: list[dict[str, Any]]
    reconcile: dict[str, Any]
    database: dict[str, Any] = field(default_factory=dict)
    daemons: list[Daemon] = field(default_factory=list)

    def start(self) -> Daemon:
        number = len(self.daemons) + 1
        port = free_port()
        config = {
            "database": {"url": self.url, "pool_size": 4, **self.database},
            "api": {"port": port},
            "reconcile": self.reconcile,
            "logging": {"level": "INFO"},
            "queues": self.queues,
        }
        path = self.workdir / f"daemon-{number}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        log = self.workdir / f"daemon-{number}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "hipq", "-c", str(path), "run"],
                                    cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        daemon = Daemon(number=number, port=port, config=path, log=log, proc=proc)
        self.daemons.append(daemon)
        return daemon

    @property
    def live(self) -> list[Daemon]:
        return [d for d in self.daemons if d.alive]

    async def wait_serving(self, daemon: Daemon, within: float = 30.0) -> None:
        deadline = time.monotonic() + within
        async with aiohttp.ClientSession() as session:
            while True:
                assert daemon.alive, f"daemon {daemon.number} exited:\n{daemon.tail()}"
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with session.get(daemon.url + "/healthz") as answer:
                        if answer.status == 200:
                            return
                assert time.monotonic() < deadline, f"daemon {daemon.number} not serving"
                await asyncio.sleep(0.05)

    async def stop(self, daemon: Daemon, within: float = 20.0) -> int:
        daemon.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(daemon.proc.wait, within)
        return int(code)

    def kill(self, daemon: Daemon) -> None:
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait(timeout=10)

    def cleanup(self) -> None:
        for daemon in self.daemons:
            if daemon.alive:
                daemon.proc.kill()
                daemon.proc.wait(timeout=10)

    def by_pid(self, owner: str) -> Daemon | None:
        """The daemon of an owner id (``host:pid:nonce``)."""
        pid = int(owner.split(":")[-2])
        return next((d for d in self.daemons if d.pid == pid), None)

    async def leases(self) -> dict[int, set[str]]:
        """Live leases by daemon number."""
        conn = await asyncpg.connect(self.pg)
        try:
            rows = await conn.fetch("SELECT queue, owner FROM leases WHERE expires_at > now()")
        finally:
            await conn.close()
        out: dict[int, set[str]] = {}
        for row in rows:
            daemon = self.by_pid(row["owner"])
            out.setdefault(daemon.number if daemon else 0, set()).add(row["queue"])
        return out


Reply = Callable[["Launch"], Awaitable[None]]


@dataclass
class Launch:
    queue: str
    id: str
    attempt: int
    callback_url: str
    body: dict[str, Any]
    at: float


@dataclass
class Downstream:
    """Records every launch and answers 202; ``callbacks`` decides when and how each
    launch gets its response (``None``: the test answers itself)."""

    cluster: Cluster | None = None
    delay: float = 0.0
    fail_ratio: float = 0.0
    answer: bool = True
    url: str = ""
    launches: list[Launch] = field(default_factory=list)
    outstanding: dict[str, int] = field(default_factory=dict)  # per queue, now
    peak: dict[str, int] = field(default_factory=dict)
    answered: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None
    rng: random.Random = field(default_factory=lambda: random.Random(7))

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/launch/{queue}/{id}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._session = aiohttp.ClientSession()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        launch = Launch(queue=request.match_info["queue"], id=request.match_info["id"],
                        attempt=int(body["attempt"]), callback_url=body["callback_url"],
                        body=body, at=time.monotonic())
        self.launches.append(launch)
        q = launch.queue
        self.outstanding[q] = self.outstanding.get(q, 0) + 1
        self.peak[q] = max(self.peak.get(q, 0), self.outstanding[q])
        self.arrived.set()
        if self.answer:
            task = asyncio.create_task(self._answer_later(launch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return web.json_response({"ok": True}, status=202)

    async def _answer_later(self, launch: Launch) -> None:
        await asyncio.sleep(self.delay * (0.5 + self.rng.random()))
        failed = self.rng.random() < self.fail_ratio
        await self.respond(launch, {"status": "failed", "retryable": True} if failed
                           else {"result": {"ok": launch.id}})

    async def respond(self, launch: Launch, body: dict[str, Any]) -> None:
        """Post the response to a live daemon (any one: the URL is signed), retrying
        until one takes it. The launch stops counting as outstanding just before."""
        self.outstanding[launch.queue] -= 1
        assert self._session is not None
        while True:
            url = self._to_live_daemon(launch.callback_url)
            try:
                async with self._session.post(url, json=body) as answer:
                    if answer.status < 500:
                        self.answered += 1
                        return
            except (aiohttp.ClientError, OSError):
                pass
            await asyncio.sleep(0.1)

    def _to_live_daemon(self, url: str) -> str:
        if self.cluster is None or not self.cluster.live:
            return url
        daemon = self.rng.choice(self.cluster.live)
        parts = urlsplit(url)
        return urlunsplit(parts._replace(netloc=f"127.0.0.1:{daemon.port}"))

    async def wait_for(self, count: int, within: float = 20.0) -> None:
        deadline = time.monotonic() + within
        while len(self.launches) < count:
            self.arrived.clear()
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"only {len(self.launches)} of {count} launches arrived"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), remaining)


async def enqueue(session: aiohttp.ClientSession, daemon: Daemon, queue: str,
                  job_id: str, data: dict[str, Any] | None = None) -> None:
    async with session.put(f"{daemon.url}/v1/jobs/{queue}/{job_id}",
                           json={"data": data or {}}) as answer:
        assert answer.status in (200, 201), await answer.text()


async def enqueue_batch(session: aiohttp.ClientSession, daemon: Daemon, queue: str,
                        ids: list[str]) -> None:
    for start in range(0, len(ids), 1000):
        chunk = [{"id": i, "data": {}} for i in ids[start:start + 1000]]
        async with session.post(f"{daemon.url}/v1/jobs/{queue}/batch",
                                json={"jobs": chunk}) as answer:
            assert answer.status == 200, await answer.text()


async def wait_until(check: Callable[[], Awaitable[bool]], within: float,
                     what: str) -> float:
    """Poll ``check`` until true; the seconds it took."""
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < within, f"not within {within}s: {what}"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def job_counts(pg: str) -> dict[str, int]:
    conn = await asyncpg.connect(pg)
    try:
        live = dict(await conn.fetch("SELECT status, count(*) FROM jobs GROUP BY status"))
        archived = dict(await conn.fetch(
            "SELECT status, count(*) FROM archived_jobs GROUP BY status"))
    finally:
        await conn.close()
    return {**{f"live_{k}": v for k, v in live.items()}, **archived}

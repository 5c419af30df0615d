"""``hipq enqueue`` trusts no listener (docs/operations.md, "hipq enqueue and a running
daemon"): whoever binds the API port while the daemon is down, replaying the daemon's
``/healthz`` word for word or relaying the CLI's questions to a real daemon of the same
database elsewhere, gets no token and no job; the job goes to the database, with a
warning. The daemon that proves itself gets the job, with the producer token.

Real processes and sockets: ``hipq run`` and ``hipq enqueue`` as subprocesses, the
fake listeners on 127.0.0.1 in the test's own event loop; SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from tests.api.subprocess_daemon import hipq_run_process

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.slow
ADMIN = "admin-token-46-0123456789"
PRODUCER = "producer-token-46-0123456789"
GREET = {"kind": "python", "function": "hipq.contrib.example_targets:greet"}
SLOW_TICKS = 30  # a job written to the database waits this long for a tick
LEASE_SECONDS = 90  # a lease refresh (a tick) every 30 s


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(db_url: str, port: int, *, tokens: list[dict[str, str]] | None = None,
            notify: bool = True) -> dict[str, Any]:
    return {"database": {"url": db_url, "notify": notify},
            "api": {"host": "127.0.0.1", "port": port,
                    "tokens": tokens if tokens is not None else
                    [{"token": ADMIN, "role": "admin"},
                     {"token": PRODUCER, "role": "producer"}]},
            "reconcile": {"interval_seconds": SLOW_TICKS, "lease_seconds": LEASE_SECONDS},
            "queues": [{"id": "greetings", "concurrency": 5, "target": GREET}]}


def _write_config(workdir: Path, config: dict[str, Any]) -> None:
    workdir.mkdir(exist_ok=True)
    (workdir / "hipq.yaml").write_text(yaml.safe_dump(config))


async def _hipq(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = str(ROOT)
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "hipq", "-c", "hipq.yaml", *args], cwd=cwd,
        env=env, capture_output=True, text=True, timeout=60, check=False)


async def _enqueue(cwd: Path, job_id: str) -> subprocess.CompletedProcess[str]:
    return await _hipq(cwd, "enqueue", "greetings", "--id", job_id,
                       "--data", '{"name": "ann"}')


async def _stored(cwd: Path, job_id: str) -> dict[str, Any]:
    """The job as the database holds it (``hipq show`` reads the database)."""
    shown = await _hipq(cwd, "show", "greetings", job_id)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)  # type: ignore[no-any-return]


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Answer = Callable[[web.Request], Awaitable[web.Response]]


@dataclass
class FakeListener:
    """Whoever holds the port: records every request, answers ``/healthz`` with
    ``healthz`` and 201 to any PUT (as a daemon that stored the job would)."""

    healthz: Answer
    seen: list[Seen] = field(default_factory=list)
    answered: list[Any] = field(default_factory=list)  # its /healthz answers (JSON)

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(Seen(request.method, request.path_qs, dict(request.headers),
                              await request.read()))
        if request.path == "/healthz":
            answer = await self.healthz(request)
            assert isinstance(answer.body, bytes)
            self.answered.append(json.loads(answer.body))
            return answer
        if request.method == "PUT":
            queue, job_id = request.match_info["tail"].split("/")[-2:]
            return web.json_response({"id": job_id, "queue": queue, "status": "queued"},
                                     status=201)
        return web.json_response({"error": {"code": "not_found", "message": "no"}},
                                 status=404)

    def assert_got_nothing(self) -> None:
        assert self.seen, "the CLI never asked the listener (the test proves nothing)"
        for seen in self.seen:
            assert "Authorization" not in seen.headers, seen
            assert ADMIN not in repr(seen), seen
            assert PRODUCER not in repr(seen), seen
            assert seen.method == "GET", seen  # no job was sent
            assert b"ann" not in seen.body, seen


@asynccontextmanager
async def fake_listener(port: int, healthz: Answer) -> AsyncIterator[FakeListener]:
    fake = FakeListener(healthz)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield fake
    finally:
        await runner.cleanup()


@dataclass(frozen=True)
class Recorded:
    status: int
    body: bytes
    content_type: str


async def _record_healthz(url: str) -> dict[str, Recorded]:
    """The daemon's answers to ``/healthz``, plain and with a nonce of its own."""
    answers = {}
    async with aiohttp.ClientSession() as http:
        for query in ("", f"?nonce={secrets.token_hex(32)}"):
            async with http.get(f"{url}/healthz{query}") as answer:
                answers[query] = Recorded(answer.status, await answer.read(),
                                          answer.content_type)
    assert answers[""].status == 200, answers
    return answers


def _replay(recorded: dict[str, Recorded]) -> Answer:
    """Answers every ``/healthz`` as the daemon answered it, with a proof it gave."""
    async def healthz(request: web.Request) -> web.Response:
        answer = recorded["" if not request.query else next(k for k in recorded if k)]
        return web.Response(body=answer.body, status=answer.status,
                            content_type=answer.content_type)

    return healthz


def _relay(daemon_url: str) -> Answer:
    """Asks a real daemon of the same database the CLI's very question (same path,
    same query, headers) and answers with its answer, word for word."""
    async def healthz(request: web.Request) -> web.Response:
        async with aiohttp.ClientSession() as http, \
                http.get(daemon_url + request.path_qs, headers={
                    k: v for k, v in request.headers.items() if k.lower() != "host"}) as answer:
            return web.Response(body=await answer.read(), status=answer.status,
                                content_type=answer.content_type)

    return healthz


def _assert_written_directly(done: subprocess.CompletedProcess[str], base: str,
                             fake: FakeListener) -> None:
    """The CLI wrote the job to the database, said so, and says nothing else."""
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"id": "j1", "status": "created"}
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"warning: the listener at {base} did not prove"), done.stderr
    assert "no valid proof" in done.stderr, done.stderr  # the check that held
    assert done.stderr.endswith("; writing the job to the database instead\n"), done.stderr
    # what it was shown was a real daemon's answer with a real proof, of this database
    assert [a["status"] for a in fake.answered] == ["ok"], fake.answered
    assert len(fake.answered[0]["proof"]) == 64, fake.answered


async def test_a_listener_replaying_healthz_gets_no_token_and_no_job(
        tmp_path: Path, db_url: str) -> None:
    """The daemon is down; a local process holds its port and answers ``/healthz``
    exactly as the daemon did (same ``instance``, a proof it gave for another nonce)
    and 201 to any PUT: the CLI sends it no token and no job, writes the job to the
    database, and says so."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    async with hipq_run_process(tmp_path, _config(db_url, port)) as url:
        recorded = await _record_healthz(url)
    async with fake_listener(port, _replay(recorded)) as fake:
        done = await _enqueue(tmp_path, "j1")
    fake.assert_got_nothing()
    _assert_written_directly(done, base, fake)
    assert fake.answered[0]["instance"] == json.loads(recorded[""].body)["instance"]
    assert (await _stored(tmp_path, "j1"))["status"] == "queued"  # in the database
    quiet = await _enqueue(tmp_path, "j2")  # nobody listens: no daemon, nothing to warn of
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    assert (await _stored(tmp_path, "j2"))["status"] == "queued"


async def test_a_listener_relaying_to_a_real_daemon_gets_no_token_and_no_job(
        tmp_path: Path, db_url: str) -> None:
    """A daemon of the same database runs at another address; the process holding
    this config's port forwards the CLI's ``/healthz`` question to it and hands back
    its answer: the proof names the connection it was made on, so it does not
    serve here."""
    theirs, ours = tmp_path / "cluster-peer", tmp_path / "here"
    theirs.mkdir()
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    _write_config(ours, _config(db_url, port))
    async with hipq_run_process(theirs, _config(db_url, _free_port())) as url:
        assert (await _record_healthz(url))[""].status == 200
        async with fake_listener(port, _relay(url)) as fake:
            done = await _enqueue(ours, "j1")
    fake.assert_got_nothing()
    _assert_written_directly(done, base, fake)
    assert (await _stored(ours, "j1"))["status"] in {"queued", "running", "succeeded"}


async def test_the_cli_proves_the_daemon_and_enqueues_with_the_producer_token(
        tmp_path: Path, db_url: str) -> None:
    """The daemon proves itself; the job goes through its API at once, sent with
    the producer token although the config lists an admin token first (this
    daemon would refuse that admin token, and the job would wait for a tick)."""
    port = _free_port()
    daemon_dir, cli_dir = tmp_path / "daemon", tmp_path / "cli"
    daemon_dir.mkdir()
    _write_config(cli_dir, _config(db_url, port, notify=False, tokens=[
        {"token": "admin-token-the-daemon-does-not-know", "role": "admin"},
        {"token": PRODUCER, "role": "producer"}]))
    async with hipq_run_process(daemon_dir, _config(db_url, port)):
        done = await _enqueue(cli_dir, "fast-1")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"id": "fast-1", "status": "created"}
        assert done.stderr == ""
        deadline = time.monotonic() + 10
        while (job := await _stored(cli_dir, "fast-1"))["status"] != "succeeded":
            assert time.monotonic() < deadline, job
            await asyncio.sleep(0.1)  # polling another process's database
    took = datetime.fromisoformat(job["finished_at"]) - datetime.fromisoformat(job["created_at"])
    assert took.total_seconds() < 1.0, job  # the API's wake-up: a tick is 30 s away

"""Fixtures for the integration kit: a real ``hipq run`` subprocess (SQLite and
PostgreSQL through ``db_url``), a callback_app downstream on 127.0.0.1, and the
in-process daemons of tests/api (``live``) for schedules under a FakeClock."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from hipq.client import AsyncClient, JobOut
from tests.api.conftest import ADMIN, SIGNING_KEY, TOKENS, live  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
HipqRun = Callable[..., Awaitable[str]]


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


async def wait_for_line(path: Path, pattern: str, proc: subprocess.Popen[bytes],
                        within: float = 30.0) -> re.Match[str]:
    """The first match of ``pattern`` in a subprocess's log file (polled: a child's
    output gives no signal to wait on)."""
    deadline = time.monotonic() + within
    while not (found := re.search(pattern, read(path))):
        assert proc.poll() is None, read(path)
        assert time.monotonic() < deadline, read(path)
        await asyncio.sleep(0.05)
    return found


def read(path: Path) -> str:
    return path.read_text()


def write(path: Path, text: str) -> None:
    path.write_text(text)


def hipq_config(db_url: str, **extra: Any) -> dict[str, Any]:
    return {"database": {"url": db_url},
            "api": {"host": "127.0.0.1", "port": 0, "tokens": TOKENS},
            "reconcile": {"interval_seconds": 0.5}, "signing_key": SIGNING_KEY, **extra}


@pytest.fixture
async def hipq_run(tmp_path: Path, db_url: str) -> AsyncIterator[HipqRun]:
    """Start ``hipq run`` subprocesses: ``await hipq_run(**config)`` -> its base URL.
    Each is stopped with SIGTERM at the end and must exit 0 without a traceback."""
    started: list[tuple[subprocess.Popen[bytes], Path]] = []

    async def start(**extra: Any) -> str:
        workdir = tmp_path / f"hipq{len(started)}"
        workdir.mkdir()
        write(workdir / "hipq.yaml", yaml.safe_dump(hipq_config(db_url, **extra)))
        log_path = workdir / "run.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen(  # noqa: ASYNC220 (returns at once; the test owns it)
                [sys.executable, "-m", "hipq", "-c", "hipq.yaml", "run"],
                cwd=workdir, env=child_env(), stdout=log, stderr=subprocess.STDOUT)
        started.append((proc, log_path))
        found = await wait_for_line(log_path, r"API listening on (http://\S+)", proc)
        return found.group(1)

    yield start
    for proc, log_path in started:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 30)
        assert code == 0, read(log_path)
        assert "Traceback" not in read(log_path), read(log_path)


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[web.Application], Awaitable[str]]]:
    """Serve an aiohttp application on 127.0.0.1 (any free port): -> its base URL."""
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def wait_job(client: AsyncClient, queue: str, job_id: str, *statuses: str,
                   within: float = 20.0) -> JobOut:
    """Poll the API until the job's status is one of ``statuses`` (bounded)."""
    deadline = time.monotonic() + within
    while True:
        job = await client.get_job(queue, job_id)
        if job.status in statuses:
            return job
        assert time.monotonic() < deadline, f"job stuck: {job}"
        await asyncio.sleep(0.05)  # polling the API; there is no event to wait on


def http_target(url: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "http", "url": url + "/launch/{queue}/{id}", "mode": "callback",
            "timeout_seconds": 5, **extra}

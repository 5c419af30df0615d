"""The CLI beside a running ``hipq run`` (real processes and sockets, SQLite and
PostgreSQL): ``hipq enqueue`` starts a job at once (through the daemon's API, or on
PostgreSQL by a NOTIFY when no API is reachable), the start line names the
dashboard, an API update of a queue the file declares says so, a dotted target path
over the API says "use module:function"; ``scripts/run`` prints the dashboard URL;
``hipq demo`` uses ``-c`` and fails at once on a busy port."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hipq.api.handlers import WARNING_HEADER
from tests.api.subprocess_daemon import hipq_run_process

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.slow
ADMIN = "admin-token-27-0123456789"
PRODUCER = "producer-token-27-0123456789"
GREET = {"kind": "python", "function": "hipq.contrib.example_targets:greet"}
SLOW_TICKS = 30  # a job found by a tick would wait this long: only a wake-up is fast


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _hipq(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "hipq", "-c", "hipq.yaml", *args], cwd=cwd,
        env=_env(), capture_output=True, text=True, timeout=60, check=False)


def _config(db_url: str, port: int) -> dict[str, Any]:
    return {"database": {"url": db_url},
            "api": {"host": "127.0.0.1", "port": port,
                    "tokens": [{"token": ADMIN, "role": "admin"},
                               {"token": PRODUCER, "role": "producer"}]},
            "reconcile": {"interval_seconds": SLOW_TICKS},
            "queues": [{"id": "greetings", "concurrency": 5, "target": GREET}]}


async def _enqueue_and_time(workdir: Path, job_id: str) -> float:
    """``hipq enqueue`` one job; seconds from its creation to its end (daemon clock)."""
    done = await _hipq(workdir, "enqueue", "greetings", "--id", job_id,
                       "--data", '{"name": "ann"}')
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"id": job_id, "status": "created"}
    deadline = time.monotonic() + 10
    while True:
        shown = await _hipq(workdir, "show", "greetings", job_id)
        job = json.loads(shown.stdout)
        if job["status"] == "succeeded" or time.monotonic() > deadline:
            break
    assert job["status"] == "succeeded", job
    return (datetime.fromisoformat(job["finished_at"])
            - datetime.fromisoformat(job["created_at"])).total_seconds()


async def test_enqueue_goes_through_the_running_daemon(tmp_path: Path, db_url: str) -> None:
    port = _free_port()
    async with hipq_run_process(tmp_path, _config(db_url, port)) as url:
        assert await _enqueue_and_time(tmp_path, "fast-1") < 1.0  # not the 30 s tick
        again = await _hipq(tmp_path, "enqueue", "greetings", "--id", "fast-1",
                            "--data", '{"name": "ann"}')
        assert json.loads(again.stdout)["status"] == "exists"
        missing = await _hipq(tmp_path, "enqueue", "nope")  # the daemon's refusal, as one line
        assert missing.returncode == 1
        assert missing.stderr == "hipq: error: queue 'nope' does not exist\n"
    log = (tmp_path / "run.log").read_text()
    assert f"dashboard: {url}/" in log  # hipq run says where its dashboard is
    assert "fast-1" not in log or "Traceback" not in log


async def test_enqueue_leaves_alone_a_daemon_of_another_database(tmp_path: Path,
                                                                  db_url: str) -> None:
    """Another project's daemon on this config's port (the default 8080 of both,
    say) works on another database: the job goes to this config's database, not
    through that daemon (its ``/healthz`` ``instance`` names another one)."""
    port = _free_port()
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    theirs.mkdir()
    ours.mkdir()
    (ours / "hipq.yaml").write_text(json.dumps(_config(f"sqlite:///{ours / 'hipq.db'}", port)))
    assert (await _hipq(ours, "migrate")).returncode == 0
    async with hipq_run_process(theirs, _config(db_url, port)):
        done = await _hipq(ours, "enqueue", "greetings", "--id", "mine",
                           "--data", '{"name": "ann"}')
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"id": "mine", "status": "created"}
        in_ours = await _hipq(ours, "show", "greetings", "mine")
        assert json.loads(in_ours.stdout)["status"] == "queued"  # no daemon of ours runs
        in_theirs = await _hipq(theirs, "show", "greetings", "mine")
        assert in_theirs.returncode != 0  # never sent to their daemon


async def test_postgres_enqueue_without_api_wakes_the_daemon(tmp_path: Path, backend: str,
                                                             db_url: str) -> None:
    """No API to reach (port 0): the job goes to the database, and a NOTIFY wakes
    the daemon (PostgreSQL); SQLite has no such wake-up and waits for a tick."""
    if backend != "postgresql":
        pytest.skip("NOTIFY is PostgreSQL's")
    async with hipq_run_process(tmp_path, _config(db_url, 0)):
        assert await _enqueue_and_time(tmp_path, "woken-1") < 1.0


async def test_api_update_of_a_declared_queue_warns(tmp_path: Path, db_url: str) -> None:
    async with hipq_run_process(tmp_path, _config(db_url, 0)) as url, \
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {ADMIN}"}) as http:
        async def post(body: dict[str, Any]) -> tuple[int, dict[str, Any], str | None]:
            async with http.post(f"{url}/v1/jobs", json=body) as answer:
                return answer.status, await answer.json(), answer.headers.get(WARNING_HEADER)

        same = await post({"id": "greetings", "concurrency": 5, "target": GREET})
        assert same[0] == 200
        assert same[2] is None  # what the file says: nothing to warn of
        status, body, warning = await post({"id": "greetings", "attempts": 3, "target": {
            "kind": "http", "url": "http://127.0.0.1:9/greet/{id}"}})
        assert status == 200, body
        assert warning is not None
        assert "declared in the daemon's config file" in warning
        assert "until the daemon restarts" in warning
        other = await post({"id": "remote-greetings"})
        assert other[0] == 201
        assert other[2] is None
        status, body, _ = await post({"id": "dotted", "target": {
            "kind": "python", "function": "mytargets.greet"}})
        assert status == 422, body
        assert "use module:function (mytargets:greet)" in json.dumps(body), body
    log = (tmp_path / "run.log").read_text()
    assert log.count("queue 'greetings' is declared in the daemon's config file") == 1, log


def test_examples_producer_leaves_the_tours_queue_alone() -> None:
    text = (ROOT / "examples" / "producer.py").read_text()
    assert re.search(r'"--queue", default="remote-greetings"', text)


def _fake_venv(repo: Path) -> None:
    """``.venv`` for a copy of scripts/run: pip does nothing, ``hipq`` is this tree's."""
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(
        f'#!/bin/sh\n[ "$1 $2" = "-m pip" ] && exit 0\nexec {sys.executable} "$@"\n')
    (bin_dir / "hipq").write_text(
        f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m hipq "$@"\n')
    for name in ("python", "hipq"):
        (bin_dir / name).chmod(0o755)


def test_scripts_run_prints_the_dashboard_url(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "run", tmp_path / "scripts" / "run")
    shutil.copy(ROOT / "config.example.yaml", tmp_path / "config.example.yaml")
    _fake_venv(tmp_path)
    env = _env() | {"HIPQ_PORT": "0"}
    proc = subprocess.Popen([str(tmp_path / "scripts" / "run")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    try:
        url = None
        for line in proc.stdout:
            if line.startswith("dashboard: "):
                url = line.split()[1]
                break
        assert url is not None
        assert re.fullmatch(r"http://127\.0\.0\.1:[1-9]\d*/", url), url
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def _demo(cwd: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hipq", "demo", "--jobs", "20", *args],
                          cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_demo_uses_the_config_it_is_given(tmp_path: Path) -> None:
    port = _free_port()
    (tmp_path / "mine.yaml").write_text(f"api: {{port: {port}}}\nlogging: {{level: ERROR}}\n")
    done = _demo(tmp_path, "-c", "mine.yaml", "--seed", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"dashboard: http://127.0.0.1:{port}/" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.yaml"]  # its own database


def test_demo_on_a_busy_port_fails_at_once(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        started = time.monotonic()
        done = _demo(tmp_path, "--port", str(port), timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert time.monotonic() - started < 30
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr

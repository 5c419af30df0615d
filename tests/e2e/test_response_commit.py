"""A response is acknowledged (202) only once its inbox row is committed (docs/http-api.md).

A real ``hipq run`` on PostgreSQL is SIGKILLed while the commit of a response's
inbox row is held open by the database (a deferred trigger the test installs sleeps
at COMMIT, then refuses it): the sender got no 202, nothing was stored, and when it
sends the response again to the restarted daemon, the response is applied once and
the job ends.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import asyncpg
import pytest
import yaml

from hipq.testing import migrate_database
from tests.e2e.test_crash import crash_db  # noqa: F401 (a fixture: a fresh database)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
HOLD = """
CREATE TABLE test_hold_commits (id int);
CREATE FUNCTION test_hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM test_hold_commits) THEN
    PERFORM pg_sleep(3);
    RAISE EXCEPTION 'the test refuses this commit';
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER test_hold AFTER INSERT ON response_inbox
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_hold_commit();
INSERT INTO test_hold_commits VALUES (1);
"""


def _start(workdir: Path, url: str, port: int) -> tuple[subprocess.Popen[bytes], Path]:
    config = {"database": {"url": url, "notify": False},
              "api": {"host": "127.0.0.1", "port": port},
              "reconcile": {"interval_seconds": 0.2, "lease_seconds": 1.5},
              "queues": [{"id": "q", "timeout_seconds": 300,
                          "target": {"kind": "python",
                                     "function": "tests.e2e.crash_target:accept"}}]}
    (workdir / "hipq.yaml").write_text(yaml.safe_dump(config))
    log = workdir / f"run-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hipq", "-c", "hipq.yaml", "run"],
                                cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    return proc, log


async def _serving(proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 30
    while True:
        text = await asyncio.to_thread(log.read_text)
        found = re.search(r"API listening on (http://\S+)", text)
        if found:
            return found.group(1)
        assert proc.poll() is None, text
        assert time.monotonic() < deadline, text
        await asyncio.sleep(0.05)


async def _until(check, within: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        await asyncio.sleep(0.05)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_response_is_acknowledged_only_once_committed(
        crash_db: tuple[str, str], tmp_path: Path) -> None:  # noqa: F811
    pg, url = crash_db
    await migrate_database(url)
    conn = await asyncpg.connect(pg)
    port = _free_port()
    proc, log = _start(tmp_path, url, port)
    try:
        base = await _serving(proc, log)
        async with aiohttp.ClientSession() as session:
            async with session.put(f"{base}/v1/jobs/q/j1", json={"data": {}}) as answer:
                assert answer.status == 201, await answer.text()

            async def launched() -> bool:
                return bool(await conn.fetchval(
                    "SELECT launch_confirmed FROM jobs WHERE id = 'j1' AND status = 'running'"))

            await _until(launched, 15, "j1 launched")
            await conn.execute(HOLD)

            async def send() -> int:
                async with session.post(f"{base}/v1/jobs/q/j1",
                                        json={"status": "succeeded", "attempt": 1,
                                              "result": {"ok": True}}) as answer:
                    return answer.status

            sending = asyncio.ensure_future(send())

            async def held() -> bool:  # the inbox INSERT is in, its COMMIT is held
                return bool(await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' "
                    "AND datname = current_database()"))

            await _until(held, 15, "the commit held")
            assert not sending.done()  # no 202 before the commit
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            with pytest.raises(aiohttp.ClientError):
                await sending  # the sender saw no 202: it will send again

            async def released() -> bool:
                return not await held()

            await _until(released, 15, "the held commit refused")
            assert await conn.fetchval("SELECT count(*) FROM response_inbox") == 0
            await conn.execute("DELETE FROM test_hold_commits")

            proc, log = _start(tmp_path, url, port)  # a new daemon adopts j1
            base = await _serving(proc, log)
            assert await send() == 202  # the sender's retry

            async def ended() -> bool:
                return await conn.fetchval(
                    "SELECT status FROM archived_jobs WHERE id = 'j1'") == "succeeded"

            await _until(ended, 15, "j1 succeeded")
            rows = await conn.fetch("SELECT outcome FROM response_inbox")
            assert [r["outcome"] for r in rows] == ["applied"], rows
            tries = await conn.fetchval("SELECT count(*) FROM job_attempts WHERE job_id = 'j1'")
            assert tries == 1
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        await conn.close()

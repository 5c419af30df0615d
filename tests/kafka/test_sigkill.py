"""A real ``hipq run`` is SIGKILLed between writing Kafka responses to the inbox and
committing their offsets (a test-only hook, the consumer's ``pause_file``, injected
by ``tests/kafka/paused_hipq.py``, makes the consumer stop right there and tell us).

The next daemon re-reads the uncommitted messages; the inbox recognises them by
their dedup key, so none is inserted or applied twice, and every job still ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from hipq.bodies import EnqueueRequest
from hipq.config import QueueConfig
from hipq.service import Hipq
from hipq.store import open_store
from hipq.store import schema as s
from tests.kafka.conftest import (
    SESSION,
    Reply,
    Request,
    all_terminal,
    create_topics,
    inbox_rows,
    name,
    responder,
    wait_until,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
JOBS = 30
QUEUE = {"id": "crash", "attempts": 5, "timeout_seconds": 60,
         "target": {"kind": "kafka", "topic": ""},
         "correlation": {"request": "{data.orderId}:{data.version}",
                         "response": "{value.orderId}:{value.version}"},
         "retry": {"strategy": "fixed", "delay_seconds": 0.2}}


def answer(request: Request) -> list[Reply]:
    data = request.data
    return [Reply({"orderId": data["orderId"], "version": data["version"],
                   "attempt": request.attempt, "result": data["orderId"]},
                  key=data["orderId"])]


def _config(tmp_path: Path, db_url: str, bootstrap: str, requests_topic: str,
            responses_topic: str) -> tuple[Path, dict[str, object]]:
    queue = {**QUEUE, "target": {"kind": "kafka", "topic": requests_topic}}
    config = {
        "database": {"url": db_url},
        "api": {"enabled": False},
        "reconcile": {"interval_seconds": 0.2, "lease_seconds": 1.5},
        "kafka": {"bootstrap_servers": bootstrap, "group_id": name("hipq"),
                  "response_topics": [responses_topic], **SESSION},
        "queues": [queue],
    }
    path = tmp_path / "hipq.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path, queue


def _start(config: Path, log: Path, *, pause_file: Path | None = None
           ) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "hipq"]
    if pause_file is not None:  # the real command, its consumer built with pause_file
        command = [sys.executable, str(REPO / "tests" / "kafka" / "paused_hipq.py"),
                   str(pause_file)]
    with log.open("ab") as out:
        return subprocess.Popen([*command, "-c", str(config), "run"],
                                cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(REPO)})


async def test_sigkill_between_inbox_insert_and_commit(kafka_bootstrap: str,
                                                       tmp_path: Path) -> None:
    requests_topic, responses_topic = name("requests"), name("responses")
    await create_topics(kafka_bootstrap, requests_topic, responses_topic)
    db_url = f"sqlite+aiosqlite:///{tmp_path}/hipq.db"
    config, queue = _config(tmp_path, db_url, kafka_bootstrap, requests_topic, responses_topic)
    store = await open_store(db_url)
    await store.migrate()
    service = Hipq(store)
    await service.create_queue(QueueConfig.model_validate(queue))
    for n in range(JOBS):
        await service.enqueue("crash", f"o{n}", EnqueueRequest(
            data={"orderId": f"o{n}", "version": 1}))
    paused, log = tmp_path / "paused", tmp_path / "daemon.log"
    first: subprocess.Popen[bytes] | None = None
    second: subprocess.Popen[bytes] | None = None
    try:
        async with responder(kafka_bootstrap, requests_topic, responses_topic,
                             answer) as downstream:
            first = _start(config, log, pause_file=paused)
            await wait_until(lambda: _paused(paused, first), within=60,
                             what="the consumer to pause after its inbox insert")
            first.send_signal(signal.SIGKILL)
            await asyncio.to_thread(first.wait, 10)
            written = json.loads(await asyncio.to_thread(paused.read_text))["written"]
            before = await inbox_rows(store)
            assert len(before) >= written >= 1

            second = _start(config, log)
            # the first daemon's reconciler may have applied every response before the
            # kill: wait for the second one to run (and to handle SIGTERM) all the same
            await wait_until(lambda: _started(log, times=2, proc=second), within=60,
                             what="the second daemon to start")
            await wait_until(lambda: all_terminal(store), within=60, what="every job to end")
            sent = downstream.sent
        second.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(second.wait, 30) == 0

        rows = await inbox_rows(store)
        assert len(rows) == sent  # every response once: none lost, none inserted twice
        assert len({r.dedup_key for r in rows}) == len(rows)
        async with store.engine.connect() as conn:
            attempts = list(await conn.execute(sa.select(s.job_attempts)))
        for n in range(JOBS):
            job, history = await service.get_job("crash", f"o{n}")
            assert job.status == "succeeded", (job.id, job.error)
            assert job.result == f"o{n}"
            assert [a.outcome for a in history].count("succeeded") == 1
        assert not [a for a in attempts if a.outcome == "late_response"]
        applied = [r for r in rows if r.outcome == "applied"]
        assert len({r.correlation_key for r in applied}) == len(applied) == JOBS
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                await asyncio.to_thread(proc.wait, 10)
        await store.close()


async def _started(log: Path, *, times: int, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, "the daemon exited early"
    text = await asyncio.to_thread(log.read_text, errors="replace")
    return text.count("hipq running as") >= times


async def _paused(path: Path, proc: subprocess.Popen[bytes]) -> bool:
    """The pause file is there and whole (the hook creates it, then writes it: a
    test that only saw it exist could kill the daemon in between)."""
    assert proc.poll() is None, "the daemon exited early"
    try:
        return "written" in json.loads(await asyncio.to_thread(path.read_text))
    except (FileNotFoundError, ValueError):
        return False

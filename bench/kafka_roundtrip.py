"""Kafka round trip: enqueue -> produced -> response consumed -> archived, in jobs/s.

A daemon (in this process) launches N jobs to a request topic; a responder (a
separate process, so it does not share this event loop; hipq.downstream's
KafkaResponder, or with ``--hand-written`` the aiokafka loop it replaced) consumes
them and answers each on the response topic; the daemon's consumer writes the responses to the
inbox and the reconciler archives the jobs. Timestamps: all enqueued, all
produced (acknowledged by the broker: launch confirmed), all responses in the
inbox, all archived.

    .venv/bin/python bench/kafka_roundtrip.py --jobs 20000            # SQLite
    .venv/bin/python bench/kafka_roundtrip.py --jobs 20000 --postgres # throwaway PostgreSQL

Starts a throwaway Tansu broker (scripts/kafka-ephemeral) unless KAFKA_BOOTSTRAP is
set. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from hipq.bodies import EnqueueRequest
from hipq.config import Settings
from hipq.daemon import Daemon
from hipq.downstream import KafkaResponder, Launch
from hipq.store import schema as s

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
ENQUEUE_BATCH = 5000


def _tool(tool: str, command: str, env: dict[str, str]) -> str:
    out = subprocess.run([str(SCRIPTS / tool), command], env=env, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    return out.strip().splitlines()[-1].split("=", 1)[-1] if out.strip() else ""


def responder(bootstrap: str, requests: str, responses: str, total: int,
              hand_written: bool = False) -> None:
    respond = _respond_by_hand if hand_written else _respond
    asyncio.run(respond(bootstrap, requests, responses, total))


async def _respond(bootstrap: str, requests: str, responses: str, total: int) -> None:
    """The responder: hipq.downstream.KafkaResponder, stopped after ``total`` answers."""
    left = total

    async def succeed(launch: Launch) -> None:
        nonlocal left
        left -= 1
        if left <= 0:
            kit.stop()  # run() returns once this batch is answered and committed

    kit = KafkaResponder(bootstrap, requests, responses, succeed,
                         group_id=f"bench-{uuid.uuid4().hex[:8]}",
                         consumer_options={"session_timeout_ms": 2000,
                                           "heartbeat_interval_ms": 200})
    await kit.run()


async def _respond_by_hand(bootstrap: str, requests: str, responses: str, total: int) -> None:
    """The hand-written responder the kit's replaced (``--hand-written``), kept to
    compare the two."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    consumer = AIOKafkaConsumer(requests, bootstrap_servers=bootstrap,
                                group_id=f"bench-{uuid.uuid4().hex[:8]}",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                session_timeout_ms=2000, heartbeat_interval_ms=200)
    await producer.start()
    await consumer.start()
    done = 0
    try:
        while done < total:
            batches = await consumer.getmany(timeout_ms=200, max_records=2000)
            futures = []
            for records in batches.values():
                for record in records:
                    key = dict(record.headers)["Hipq-Correlation-Key"]
                    futures.append(await producer.send(
                        responses, value=b'{"status":"succeeded"}',
                        headers=[("Hipq-Correlation-Key", key)]))
            if futures:
                await asyncio.gather(*futures)
                done += len(futures)
    finally:
        await consumer.stop()
        await producer.stop()


async def responder_only(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    """The responder alone (``--responder-only``): N launches produced beforehand,
    then the seconds the responder takes to answer them all (join included)."""
    requests, responses = f"bench-req-{uuid.uuid4().hex[:8]}", f"bench-resp-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(requests, 4, 1), NewTopic(responses, 4, 1)])
    await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    acks = []
    for n in range(args.jobs):
        key = f"k{n}".encode()
        value = json.dumps({"id": f"j{n}", "queue": "bench", "data": {"n": n}, "attempt": 1,
                            "max_attempts": 3, "correlation_key": f"k{n}",
                            "callback_url": None}).encode()
        acks.append(await producer.send(requests, value=value, key=key,
                                        headers=[("Hipq-Correlation-Key", key)]))
    await asyncio.gather(*acks)
    await producer.stop()
    respond = _respond_by_hand if args.hand_written else _respond
    t0 = time.monotonic()
    await respond(bootstrap, requests, responses, args.jobs)
    seconds = time.monotonic() - t0
    return {"bench": "kafka_responder", "jobs": args.jobs, "database": "-",
            "responder": "hand-written" if args.hand_written else "hipq.downstream",
            "seconds": {"answered": round(seconds, 2)},
            "jobs_per_second": round(args.jobs / seconds, 1)}


async def _count(daemon: Daemon, table: sa.Table, *where: Any) -> int:
    assert daemon.store is not None
    async with daemon.store.engine.connect() as conn:
        query = sa.select(sa.func.count()).select_from(table).where(*where)
        return int((await conn.execute(query)).scalar_one())


async def _produced(daemon: Daemon) -> int:
    """Launches the broker acknowledged: confirmed running jobs plus archived ones."""
    running = await _count(daemon, s.jobs, s.jobs.c.launch_confirmed.is_(True))
    return running + await _count(daemon, s.archived_jobs)


async def run(args: argparse.Namespace, bootstrap: str, db_url: str) -> dict[str, Any]:
    requests, responses = f"bench-req-{uuid.uuid4().hex[:8]}", f"bench-resp-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(requests, 4, 1), NewTopic(responses, 4, 1)])
    await admin.close()
    settings = Settings.model_validate({
        "database": {"url": db_url},
        "api": {"enabled": False},
        "reconcile": {"interval_seconds": 0.5, "fetch_limit": args.fetch_limit,
                      "launch_concurrency": args.launch_concurrency},
        "kafka": {"bootstrap_servers": bootstrap, "group_id": f"hipq-{uuid.uuid4().hex[:8]}",
                  "response_topics": [responses], "session_timeout_ms": 2000,
                  "heartbeat_interval_ms": 200, "max_poll_records": 2000},
        "queues": [{"id": "bench", "attempts": 3, "timeout_seconds": 600,
                    "target": {"kind": "kafka", "topic": requests}}],
    })
    proc = multiprocessing.get_context("spawn").Process(
        target=responder, args=(bootstrap, requests, responses, args.jobs, args.hand_written),
        daemon=True)
    proc.start()
    daemon = Daemon(settings)
    service = await daemon.open()
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(daemon.run(stop=stop, ready=ready))
    await ready.wait()
    assert daemon.kafka_consumer is not None
    await asyncio.wait_for(daemon.kafka_consumer.assigned.wait(), 30)
    marks: dict[str, float] = {}
    t0 = time.monotonic()
    for start in range(0, args.jobs, ENQUEUE_BATCH):
        items = [(f"j{n}", EnqueueRequest(data={"n": n}))
                 for n in range(start, min(start + ENQUEUE_BATCH, args.jobs))]
        await service.enqueue_many("bench", items)
    marks["enqueued"] = time.monotonic() - t0
    while "archived" not in marks:
        await asyncio.sleep(0.1)
        now = time.monotonic() - t0
        if "produced" not in marks and await _produced(daemon) >= args.jobs:
            marks["produced"] = now
        if "consumed" not in marks and await _count(
                daemon, s.response_inbox) >= args.jobs:
            marks["consumed"] = now
        if await _count(daemon, s.archived_jobs, s.archived_jobs.c.status == "succeeded"
                        ) >= args.jobs:
            marks["archived"] = now
        assert now < args.deadline, f"not done after {args.deadline}s: {marks}"
    stop.set()
    await task
    proc.join(10)
    total = marks["archived"]
    return {"bench": "kafka_roundtrip", "jobs": args.jobs,
            "responder": "hand-written" if args.hand_written else "hipq.downstream",
            "database": "postgresql" if args.postgres else "sqlite",
            "seconds": {k: round(v, 2) for k, v in marks.items()},
            "jobs_per_second": round(args.jobs / total, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--postgres", action="store_true",
                        help="a throwaway PostgreSQL (scripts/pg-ephemeral) instead of SQLite")
    parser.add_argument("--fetch-limit", type=int, default=2000)
    parser.add_argument("--launch-concurrency", type=int, default=500)
    parser.add_argument("--deadline", type=float, default=600)
    parser.add_argument("--responder-only", action="store_true",
                        help="time the responder alone on launches produced beforehand")
    parser.add_argument("--hand-written", action="store_true",
                        help="the hand-written responder instead of hipq.downstream's")
    args = parser.parse_args()
    name = f"bench-kafka-{os.getpid()}"
    env = dict(os.environ, KAFKA_EPHEMERAL_NAME=name, PG_EPHEMERAL_NAME=name,
               PYTHON=sys.executable)
    stops = []
    try:
        bootstrap = os.environ.get("KAFKA_BOOTSTRAP") or _tool("kafka-ephemeral", "start", env)
        if not os.environ.get("KAFKA_BOOTSTRAP"):
            stops.append("kafka-ephemeral")
        with tempfile.TemporaryDirectory() as tmp:
            if args.postgres:
                stops.append("pg-ephemeral")
                url = _tool("pg-ephemeral", "start", env).replace("postgresql://",
                                                                   "postgresql+asyncpg://")
            else:
                url = f"sqlite+aiosqlite:///{tmp}/bench.db"
            result = asyncio.run(responder_only(args, bootstrap) if args.responder_only
                                 else run(args, bootstrap, url))
    finally:
        for tool in stops:
            subprocess.run([str(SCRIPTS / tool), "stop"], env=env, check=False,
                           capture_output=True, timeout=60)
    rows = [("jobs", result["jobs"]), ("database", result["database"]),
            ("responder", result["responder"]),
            *((f"all {k} (s)", v) for k, v in result["seconds"].items()),
            ("round trip (jobs/s)", result["jobs_per_second"])]
    width = max(len(k) for k, _ in rows)
    print(f"{'metric':<{width}} | value")
    print(f"{'-' * width}-|-------")
    for key, value in rows:
        print(f"{key:<{width}} | {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

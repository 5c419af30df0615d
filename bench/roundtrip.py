"""The round-trip phases of bench/run (issue 12), on a PostgreSQL with stock durability:
each against a real ``hipq run`` subprocess and its counterpart in its own process,
reporting jobs/s and the CPU seconds of each process.

* ``callback``: N jobs batch-enqueued into a paused queue whose HTTP target runs in
  ``callback`` mode against bench/downstream.py (hipq.downstream's ``callback_app``:
  202, then the outcome POSTed to the signed callback URL, at most its default
  concurrency at a time); resumed; timed until all archived.
* ``kafka`` / ``kafka-header``: the same with a Kafka target on Tansu, answered by
  bench/kafka_responder.py (hipq.downstream.KafkaResponder; the hand-written loop with
  ``HIPQ_BENCH_HAND_WRITTEN=1``); matched by the template
  ``{value.result.orderId}:{value.result.version}`` (no header) or by the
  ``Hipq-Correlation-Key`` header.
* ``idle``: R jobs running (bulk-loaded as confirmed running tries, adopted by the
  daemon) waiting for responses that do not come; CPU per second of hipq and of the
  PostgreSQL backends over ``seconds``, while one new job a second is enqueued (its
  enqueue->launch time); hipq's RSS; then 200 responses posted at once: the time until
  all 200 are archived.

CPU: user + system seconds from psutil over the timed window; PostgreSQL is the
postmaster and all its children (backends, checkpointer, WAL writer...), summed over
the processes alive at the start and the end of the window (a backend that came and
went in between is missed; hipq keeps its pool open)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import psutil
from common import (
    BENCH,
    PYTHON,
    drop_database,
    free_port,
    fresh_database,
    hipq_config,
    hipq_daemon,
    loadavg,
    log,
    pcts,
)
from hipq_scenarios import enqueue_batches
from kafka_responder import HAND_TEMPLATE, KIT_TEMPLATE
from pg_costs import PgCosts, pg_per_job, top_statements

from hipq.testing import bulk_insert_jobs_sql, migrate_database

POLL_SECONDS = 0.25
ORDER_TEMPLATE_REQUEST = "{data.orderId}:{data.version}"
# HIPQ_BENCH_HAND_WRITTEN=1: the hand-written counterparts the kit replaced (to compare)
HAND_WRITTEN = bool(os.environ.get("HIPQ_BENCH_HAND_WRITTEN"))


# -- CPU accounting ---------------------------------------------------------------------


def _tree_cpu(pid: int, children: bool) -> dict[int, float]:
    """CPU seconds of ``pid`` (and its children), by pid."""
    out: dict[int, float] = {}
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        procs = [root, *(root.children(recursive=True) if children else [])]
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                cpu = proc.cpu_times()
                out[proc.pid] = cpu.user + cpu.system
    return out


class CpuMeter:
    """CPU seconds of named process trees between :meth:`start` and :meth:`stop`."""

    def __init__(self, **trees: tuple[int, bool]) -> None:
        self.trees = trees  # name -> (pid, with children)
        self._start: dict[str, dict[int, float]] = {}
        self.seconds: dict[str, float] = {}

    def start(self) -> None:
        self._start = {name: _tree_cpu(*tree) for name, tree in self.trees.items()}

    def stop(self) -> dict[str, float]:
        for name, tree in self.trees.items():
            end, begin = _tree_cpu(*tree), self._start[name]
            self.seconds[name] = round(sum(cpu - begin.get(pid, 0.0)
                                           for pid, cpu in end.items()), 3)
        return self.seconds


async def postmaster_pid(url: str) -> int:
    """The postmaster of the server at ``url`` (the parent of a backend)."""
    conn = await asyncpg.connect(url)
    try:
        backend = int(await conn.fetchval("SELECT pg_backend_pid()"))
        return int(psutil.Process(backend).ppid())
    finally:
        await conn.close()


# -- the counterparts ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def child(argv: list[str], ready_prefix: str) -> AsyncIterator[tuple[int, str]]:
    """A subprocess whose first stdout line starts with ``ready_prefix``: (pid, line)."""
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip()
        if not line.startswith(ready_prefix):
            raise SystemExit(f"{argv[1]} did not start: {line!r}")
        yield proc.pid, line
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


async def wait_for_log(path: Path, text: str, within: float) -> None:
    deadline = time.monotonic() + within
    while text not in await asyncio.to_thread(path.read_text, errors="replace"):
        if time.monotonic() > deadline:
            raise SystemExit(f"{path}: no {text!r} within {within:g} s")
        await asyncio.sleep(0.1)


async def wait_archived(conn: asyncpg.Connection, queue: str, jobs: int,
                        within: float) -> int:
    deadline = time.monotonic() + within
    archived = 0
    while time.monotonic() < deadline:
        archived = int(await conn.fetchval(
            "SELECT count(*) FROM archived_jobs WHERE queue = $1", queue))
        if archived >= jobs:
            break
        await asyncio.sleep(POLL_SECONDS)
    return archived


# -- callback and Kafka round trips ----------------------------------------------------------


async def round_trip(server: str, workdir: Path, *, kind: str, jobs: int, within: float,
                     bootstrap: str | None = None, name: str,
                     py_spy: bool = False) -> dict[str, Any]:
    """``kind``: callback | kafka | kafka-header. Paused queue, N jobs, resume, time
    until all archived. ``py_spy``: the daemon runs under py-spy (its profile beside
    its log)."""
    db = f"bench_{name.replace('-', '_')}"
    url = await fresh_database(server, db)
    queue = "rt"
    postmaster = await postmaster_pid(server)
    reconcile: dict[str, Any] = {"interval_seconds": 1}
    extra: dict[str, Any] = {}
    port = free_port()
    if kind == "callback":
        argv = [PYTHON, str(BENCH / "downstream.py"), "--mode", "callback",
                "--hipq-url", f"http://127.0.0.1:{port}"]
        ready = "PORT="
    else:
        assert bootstrap is not None
        requests, responses = (f"bench-req-{uuid.uuid4().hex[:8]}",
                               f"bench-resp-{uuid.uuid4().hex[:8]}")
        await create_topics(bootstrap, requests, responses)
        argv = [PYTHON, str(BENCH / "kafka_responder.py"), "--bootstrap", bootstrap,
                "--requests", requests, "--responses", responses]
        if kind == "kafka-header":
            argv.append("--header")
        if HAND_WRITTEN:
            argv.append("--hand-written")
        ready = "READY"
        extra["kafka"] = {"bootstrap_servers": bootstrap, "group_id": f"hipq-{name}",
                          "response_topics": [responses], "max_poll_records": 5000,
                          "session_timeout_ms": 6000, "heartbeat_interval_ms": 500}
    load_before = loadavg()
    async with child(argv, ready) as (other_pid, line):
        if kind == "callback":
            target: dict[str, Any] = {"kind": "http", "mode": "callback", "max_in_flight": 200,
                                      "url": f"http://127.0.0.1:{line.split('=', 1)[1]}"
                                             "/launch"}
            queue_cfg: dict[str, Any] = {"id": queue, "paused": True, "target": target}
        else:
            queue_cfg = {"id": queue, "paused": True,
                         "target": {"kind": "kafka", "topic": requests}}
            if kind == "kafka":
                queue_cfg["correlation"] = {
                    "request": ORDER_TEMPLATE_REQUEST,
                    "response": HAND_TEMPLATE if HAND_WRITTEN else KIT_TEMPLATE}
        config = {**hipq_config(url, port, [queue_cfg], reconcile), **extra}
        config["api"]["public_url"] = f"http://127.0.0.1:{port}"
        async with hipq_daemon(config, workdir, name,
                               py_spy=workdir if py_spy else None) as daemon, \
                aiohttp.ClientSession() as session:
            bodies = [json.dumps({"jobs": [
                {"id": f"{name}-{i}", "data": {"orderId": f"o{i}", "version": 1, "n": i}}
                for i in range(start, min(start + 1000, jobs))]}).encode()
                for start in range(0, jobs, 1000)]
            created = await enqueue_batches(session, daemon.base_url, queue, bodies, 2)
            if kind != "callback":  # the response consumer has its partitions
                await wait_for_log(daemon.log_path, "Kafka response consumer joined group",
                                   within=60)
            conn = await asyncpg.connect(url)
            try:
                await conn.execute("ANALYZE")
                meter = CpuMeter(hipq=(daemon.pid, False), postgres=(postmaster, True),
                                 other=(other_pid, True))
                costs = PgCosts(server, db)
                await costs.start()
                meter.start()
                t0 = time.time()
                async with session.post(f"{daemon.base_url}/v1/jobs/{queue}/resume") as answer:
                    answer.raise_for_status()
                archived = await wait_archived(conn, queue, jobs, within)
                cpu = meter.stop()
                pg = await costs.stop(jobs)
                row = await conn.fetchrow(
                    "SELECT count(*) FILTER (WHERE status = 'succeeded') AS ok, "
                    "extract(epoch FROM max(finished_at))::float8 AS last "
                    "FROM archived_jobs WHERE queue = $1", queue)
            finally:
                await conn.close()
            rss = daemon.rss.peak_mb
    await drop_database(server, db)
    elapsed = max((row["last"] or time.time()) - t0, 1e-3)
    out = {"kind": kind, "jobs": jobs, "created": created, "archived": archived,
           "succeeded": int(row["ok"]), "complete": archived >= jobs,
           "seconds": round(elapsed, 2), "completed_jobs_per_s": round(archived / elapsed, 1),
           "cpu_s": cpu, "cpu_ms_per_job": {k: round(v * 1000 / max(archived, 1), 3)
                                            for k, v in cpu.items()},
           "postgres_per_job": pg, "peak_rss_mb": round(rss, 1), "loadavg_before": load_before,
           "loadavg_after": loadavg()}
    log(f"  {name}: {out['completed_jobs_per_s']:,.0f} jobs/s ({archived:,}/{jobs:,} in "
        f"{elapsed:.1f} s); CPU s hipq {cpu['hipq']:.1f} / PostgreSQL {cpu['postgres']:.1f} / "
        f"other side {cpu['other']:.1f}; {pg_per_job(pg)}{top_statements(pg)}")
    return out


async def create_topics(bootstrap: str, *topics: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, 4, 1) for t in topics])
    finally:
        await admin.close()


# -- idle ------------------------------------------------------------------------------------


def idle_queues(queues: int) -> list[str]:
    """The queues of an idle run: ``idle``, or ``idle-0`` ... when there are several."""
    return ["idle"] if queues == 1 else [f"idle-{q}" for q in range(queues)]


async def idle(server: str, workdir: Path, *, running: int, seconds: float,
               responses: int, within: float = 120, queues: int = 1) -> dict[str, Any]:
    """``running`` jobs waiting for responses, spread evenly over ``queues`` queues;
    CPU/s of hipq and PostgreSQL over ``seconds`` with one new job enqueued a second
    (to each queue in turn); then ``responses`` posted at once."""
    name = f"idle_{running}" if queues == 1 else f"idle_{queues}q_{running}"
    db = f"bench_{name}"
    url = await fresh_database(server, db)
    names = idle_queues(queues)
    per_queue = -(-running // queues)  # job numbers i of queue k: k * per_queue + 1 ...
    await migrate_database(url)
    postmaster = await postmaster_pid(server)
    conn = await asyncpg.connect(url)
    now = datetime.now(UTC)
    for k, queue in enumerate(names):
        await conn.execute(bulk_insert_jobs_sql(
            status="'running'", attempt="1", launched_at="$2::timestamptz",
            deadline="$2::timestamptz + interval '1 day'",
            correlation_key="'~' || md5('token' || i::text) || '.1'",  # as a claim makes it
            owner="'gone'", launch_confirmed="true", run_at="$2::timestamptz"),
            queue, now, k * per_queue + 1, min((k + 1) * per_queue, running))
    await conn.execute("ANALYZE")
    load_before = loadavg()
    try:
        async with child([PYTHON, str(BENCH / "downstream.py"), "--mode", "accept",
                          "--record"], "PORT=") as (_, line):
            down = f"http://127.0.0.1:{line.split('=', 1)[1]}"
            config = hipq_config(url, free_port(), [{
                "id": queue, "target": {"kind": "http", "mode": "callback",
                                        "url": f"{down}/launch"}} for queue in names],
                reconcile={"interval_seconds": 1})
            async with hipq_daemon(config, workdir, name) as daemon, \
                    aiohttp.ClientSession() as session:
                t_adopt = time.monotonic()
                # the adoption is done when the daemon logs it for every queue (the
                # jobs change owner in one statement, then are read a page at a time)
                while daemon.log_path.read_bytes().count(b"adopted ") < queues:
                    if time.monotonic() - t_adopt > within:
                        raise SystemExit(f"{name}: the running jobs were not adopted")
                    await asyncio.sleep(POLL_SECONDS)
                adopt_s = time.monotonic() - t_adopt
                await asyncio.sleep(3)  # settle after the adoption
                meter = CpuMeter(hipq=(daemon.pid, False), postgres=(postmaster, True))
                meter.start()
                t0 = time.monotonic()
                sent: dict[str, float] = {}
                n = 0
                while time.monotonic() - t0 < seconds:
                    job = f"new-{n}"
                    sent[job] = time.time()
                    queue = names[n % queues]
                    async with session.put(f"{daemon.base_url}/v1/jobs/{queue}/{job}",
                                           json={"data": {}}) as answer:
                        await answer.read()
                    n += 1
                    await asyncio.sleep(max(0.0, t0 + n - time.monotonic()))
                cpu = meter.stop()
                window = time.monotonic() - t0
                rss = daemon.rss.last_mb
                async with session.get(f"{down}/_dump") as answer:
                    seen: dict[str, dict[str, float]] = await answer.json()
                launch_ms = [(seen[j]["launch"] - t) * 1000 for j, t in sent.items() if j in seen]
                # the first jobs of each queue in turn, by job number i
                numbers = sorted(range(1, running + 1),
                                 key=lambda i: ((i - 1) % per_queue, i))[:responses]
                answered = [(names[(i - 1) // per_queue], f"job-{i:08d}") for i in numbers]
                on_queues = [q for q, _ in answered]
                ids = [j for _, j in answered]
                t_resp = time.time()

                async def respond(queue: str, job: str) -> None:
                    async with session.post(f"{daemon.base_url}/v1/jobs/{queue}/{job}",
                                            json={"status": "succeeded", "attempt": 1}) as answer:
                        await answer.read()
                        if answer.status != 202:
                            raise SystemExit(f"response to {job}: HTTP {answer.status}")

                await asyncio.gather(*(respond(q, j) for q, j in answered))
                answered_s = time.time() - t_resp
                deadline = time.monotonic() + within
                done = 0
                archived = ("FROM archived_jobs WHERE (queue, id) IN "
                            "(SELECT * FROM unnest($1::text[], $2::text[]))")
                while time.monotonic() < deadline:
                    done = int(await conn.fetchval(f"SELECT count(*) {archived}",
                                                   on_queues, ids))
                    if done >= responses:
                        break
                    await asyncio.sleep(0.02)
                last = await conn.fetchval(
                    f"SELECT extract(epoch FROM max(finished_at))::float8 {archived}",
                    on_queues, ids)
    finally:
        await conn.close()
        await drop_database(server, db)
    out = {"running": running, "queues": queues, "seconds": round(window, 1),
           "adopt_s": round(adopt_s, 1),
           "cpu_s": cpu, "cpu_s_per_s": {k: round(v / window, 4) for k, v in cpu.items()},
           "enqueue_to_launch_ms": pcts(launch_ms), "rss_mb": round(rss, 1),
           "responses": responses, "responses_answered_s": round(answered_s, 3),
           "responses_archived": done,
           "responses_to_archived_s": round((last or time.time()) - t_resp, 3),
           "loadavg_before": load_before, "loadavg_after": loadavg()}
    log(f"  {name} ({running:,} running on {queues} queue{'s' * (queues > 1)}): CPU s/s hipq "
        f"{out['cpu_s_per_s']['hipq']} / PostgreSQL "
        f"{out['cpu_s_per_s']['postgres']}; enqueue->launch p50 "
        f"{out['enqueue_to_launch_ms']['p50']} ms; RSS {rss:.0f} MB; {done} of {responses} "
        f"responses archived in {out['responses_to_archived_s']:.3f} s")
    return out


# -- Kafka broker ------------------------------------------------------------------------------


@contextlib.contextmanager
def kafka_broker() -> Any:
    """A throwaway Tansu broker (scripts/kafka-ephemeral), unless KAFKA_BOOTSTRAP is set."""
    import subprocess

    if os.environ.get("KAFKA_BOOTSTRAP"):
        yield os.environ["KAFKA_BOOTSTRAP"]
        return
    tool = str(BENCH.parent / "scripts" / "kafka-ephemeral")
    env = dict(os.environ, KAFKA_EPHEMERAL_NAME=f"hipq-benchrun-{os.getpid()}",
               PYTHON=sys.executable)
    out = subprocess.run([tool, "start"], env=env, check=True, capture_output=True, text=True,
                         timeout=120).stdout
    try:
        yield out.strip().splitlines()[-1].split("=", 1)[1]
    finally:
        subprocess.run([tool, "stop"], env=env, check=False, capture_output=True, timeout=60)


"""The hipq measurements of bench/run, each against a real ``hipq run`` subprocess on
its own fresh PostgreSQL database: lifecycle throughput, enqueue->launch and
response->archived latency at a steady offered load, and peak RSS with a large
backlog and many running jobs. Clocks: the daemon, the downstream and this process
share the machine's wall clock (``time.time()``), so cross-process differences are
plain subtractions."""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from common import (
    downstream,
    drop_database,
    free_port,
    fresh_database,
    hipq_config,
    hipq_daemon,
    loadavg,
    log,
    pcts,
)
from pg_costs import PgCosts, top_statements

from hipq.testing import bulk_insert_jobs_sql, migrate_database

POLL_SECONDS = 0.1


# -- enqueue clients ------------------------------------------------------------------


def batch_bodies(jobs: int, size: int, prefix: str) -> list[bytes]:
    """Pre-encoded batch requests (so the client's JSON encoding is not timed)."""
    return [json.dumps({"jobs": [{"id": f"{prefix}-{i}", "data": {"n": i}}
                                 for i in range(start, min(start + size, jobs))]}).encode()
            for start in range(0, jobs, size)]


async def enqueue_batches(session: aiohttp.ClientSession, base: str, queue: str,
                          bodies: list[bytes], in_flight: int) -> int:
    """POST the batches, ``in_flight`` at a time; returns the jobs created."""
    pending = iter(bodies)
    created = 0

    async def worker() -> None:
        nonlocal created
        for body in pending:
            async with session.post(f"{base}/v1/jobs/{queue}/batch", data=body,
                                    headers={"Content-Type": "application/json"}) as answer:
                out = await answer.json()
                if answer.status != 200:
                    raise SystemExit(f"batch enqueue answered {answer.status}: {out}")
                created += sum(1 for j in out["jobs"] if j["status"] == "created")

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return created


async def enqueue_singles(session: aiohttp.ClientSession, base: str, queue: str, jobs: int,
                          prefix: str, in_flight: int) -> int:
    """PUT one job per request, ``in_flight`` requests at a time; returns created."""
    bodies = [json.dumps({"data": {"n": i}}).encode() for i in range(jobs)]
    pending = iter(range(jobs))
    created = 0

    async def worker() -> None:
        nonlocal created
        for i in pending:
            async with session.put(f"{base}/v1/jobs/{queue}/{prefix}-{i}", data=bodies[i],
                                   headers={"Content-Type": "application/json"}) as answer:
                await answer.read()
                if answer.status not in (200, 201):
                    raise SystemExit(f"enqueue answered {answer.status}")
                created += answer.status == 201

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return created


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


def target_config(target: str, url: str | None) -> dict[str, Any]:
    if target == "python":
        return {"kind": "python", "function": "bench_targets:done"}
    if target == "python-in-tick":  # in-tick runs (docs/configuration.md, Python targets)
        return {"kind": "python", "function": "bench_targets:done", "in_tick": True}
    return {"kind": "http", "url": f"{url}/launch/{{queue}}/{{id}}", "mode": target}


# -- 1. lifecycle throughput ------------------------------------------------------------


async def lifecycle(server: str, workdir: Path, *, target: str, mode: str, jobs: int,
                    batch_size: int, in_flight: int, within: float, name: str,
                    py_spy: bool = False) -> dict[str, Any]:
    """Enqueue ``jobs`` over the API (``mode`` batch|single) into a running daemon
    whose queue launches through ``target`` (python|sync); time until all archived."""
    from roundtrip import CpuMeter, postmaster_pid  # (roundtrip imports this module)

    db = f"bench_{name}"
    url = await fresh_database(server, db)
    queue = "lc"
    load_before = loadavg()
    postmaster = await postmaster_pid(server)
    costs = PgCosts(server, db)
    async with downstream("sync") as down:
        config = hipq_config(url, free_port(), [{
            "id": queue, "target": target_config(target, down if target == "sync" else None)}])
        async with hipq_daemon(config, workdir, name,
                               py_spy=workdir if py_spy else None) as daemon:
            conn = await asyncpg.connect(url)
            try:
                connector = aiohttp.TCPConnector(limit=max(in_flight, 10))
                async with aiohttp.ClientSession(connector=connector) as session:
                    bodies = batch_bodies(jobs, batch_size, name) if mode == "batch" else []
                    await costs.start()
                    meter = CpuMeter(hipq=(daemon.pid, False), postgres=(postmaster, True),
                                     client=(os.getpid(), False))
                    meter.start()
                    t0 = time.time()
                    if mode == "batch":
                        created = await enqueue_batches(session, daemon.base_url, queue, bodies,
                                                        in_flight)
                    else:
                        created = await enqueue_singles(session, daemon.base_url, queue, jobs,
                                                        name, in_flight)
                    t_enqueued = time.time()
                archived = await wait_archived(conn, queue, jobs, within)
                cpu = meter.stop()
                pg = await costs.stop(jobs)
                row = await conn.fetchrow(
                    "SELECT count(*) FILTER (WHERE status = 'succeeded') AS ok, "
                    "extract(epoch FROM max(finished_at))::float8 AS last, "
                    "extract(epoch FROM min(finished_at))::float8 AS first "
                    "FROM archived_jobs WHERE queue = $1", queue)
            finally:
                await conn.close()
            peak, cpu_s = daemon.rss.peak_mb, daemon.rss.cpu_s
    await drop_database(server, db)
    last = row["last"] or time.time()
    first = row["first"]
    out = {
        "target": target, "enqueue": mode, "jobs": jobs, "created": created,
        "archived": archived, "succeeded": int(row["ok"]), "complete": archived >= jobs,
        "enqueue_s": round(t_enqueued - t0, 3), "all_archived_s": round(last - t0, 3),
        "enqueue_jobs_per_s": round(created / (t_enqueued - t0), 1),
        "completed_jobs_per_s": round(archived / (last - t0), 1),
        # diagnostics: when the first job was archived, and the rate from then on
        "first_archived_s": None if first is None else round(first - t0, 3),
        "archiving_jobs_per_s": (round((archived - 1) / (last - first), 1)
                                 if first is not None and last > first else None),
        "peak_rss_mb": round(peak, 1), "daemon_cpu_s": round(cpu_s, 1),
        "daemon_cpu_ms_per_job": round(cpu_s * 1000 / max(archived, 1), 3),
        # the timed window only: the daemon, PostgreSQL (every process of the server)
        # and this process (the HTTP client enqueueing the batches, and the poll)
        "cpu_s": cpu, "cpu_ms_per_job": {k: round(v * 1000 / max(archived, 1), 4)
                                         for k, v in cpu.items()},
        "postgres_per_job": pg,
        "loadavg_before": load_before, "loadavg_after": loadavg(),
        **({"batch_size": batch_size} if mode == "batch" else {}), "client_in_flight": in_flight,
    }
    log(f"  {name}: enqueue {out['enqueue_jobs_per_s']:,.0f} jobs/s, completed "
        f"{out['completed_jobs_per_s']:,.0f} jobs/s ({archived}/{jobs} archived)"
        f"{top_statements(pg)}")
    return out


async def enqueue_only(server: str, workdir: Path, *, jobs: int, batch_size: int,
                       in_flight: int, name: str) -> dict[str, Any]:
    """Batch enqueue into a paused queue: the API and the insert path alone."""
    db = f"bench_{name}"
    url = await fresh_database(server, db)
    config = hipq_config(url, free_port(), [{
        "id": "eq", "paused": True, "target": target_config("python", None)}])
    async with hipq_daemon(config, workdir, name) as daemon:
        bodies = batch_bodies(jobs, batch_size, name)
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=max(in_flight, 10))) as session:
            t0 = time.time()
            created = await enqueue_batches(session, daemon.base_url, "eq", bodies, in_flight)
            elapsed = time.time() - t0
    await drop_database(server, db)
    log(f"  {name}: {created / elapsed:,.0f} jobs/s into a paused queue")
    return {"jobs": jobs, "created": created, "enqueue_s": round(elapsed, 3),
            "enqueue_jobs_per_s": round(created / elapsed, 1), "batch_size": batch_size,
            "client_in_flight": in_flight}


async def drain(server: str, workdir: Path, *, jobs: int, batch_size: int, in_flight: int,
                within: float, name: str) -> dict[str, Any]:
    """A diagnostic beside the lifecycle: batch-enqueue into a paused queue (python
    target), ``ANALYZE`` (fresh planner statistics, as autovacuum would give a table
    that has been busy for a while), resume, and time until all archived."""
    db = f"bench_{name}"
    url = await fresh_database(server, db)
    queue = "dr"
    config = hipq_config(url, free_port(), [{
        "id": queue, "paused": True, "target": target_config("python", None)}])
    async with hipq_daemon(config, workdir, name) as daemon:
        async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=max(in_flight, 10))) as session:
            await enqueue_batches(session, daemon.base_url, queue,
                                  batch_bodies(jobs, batch_size, name), in_flight)
            conn = await asyncpg.connect(url)
            try:
                await conn.execute("ANALYZE")
                cpu_before = daemon.rss.cpu_s
                t0 = time.time()
                async with session.post(f"{daemon.base_url}/v1/jobs/{queue}/resume") as answer:
                    answer.raise_for_status()
                archived = await wait_archived(conn, queue, jobs, within)
                last = await conn.fetchval(
                    "SELECT extract(epoch FROM max(finished_at))::float8 FROM archived_jobs "
                    "WHERE queue = $1", queue)
            finally:
                await conn.close()
        cpu_s = daemon.rss.cpu_s - cpu_before
    await drop_database(server, db)
    elapsed = (last or time.time()) - t0
    log(f"  {name}: {archived / elapsed:,.0f} jobs/s from resume to all archived")
    return {"jobs": jobs, "archived": archived, "complete": archived >= jobs,
            "drain_s": round(elapsed, 3), "completed_jobs_per_s": round(archived / elapsed, 1),
            "daemon_cpu_ms_per_job": round(cpu_s * 1000 / max(archived, 1), 3)}


# -- 2. latency at a steady offered load --------------------------------------------------


async def latency(server: str, workdir: Path, *, early_wake: bool, rate: float,
                  seconds: float, warmup: float, within: float,
                  py_spy: bool = False) -> dict[str, Any]:
    """PUT one job every 1/rate s (open loop) into a queue with a callback-mode HTTP
    target; the downstream accepts (202) then calls back at once. enqueue->launch:
    just before the PUT -> the launch reaches the downstream. response->archived:
    the downstream starts its callback POST -> the job's ``finished_at``."""
    name = f"latency_{'wake' if early_wake else 'nowake'}"
    db = f"bench_{name}"
    url = await fresh_database(server, db)
    queue = "lat"
    total = round(rate * (warmup + seconds))
    skip = round(rate * warmup)
    sent: dict[str, float] = {}
    answered: dict[str, float] = {}
    load_before = loadavg()
    port = free_port()
    async with downstream("callback", record=True, hipq_url=f"http://127.0.0.1:{port}") as down:
        config = hipq_config(url, port, [{
            "id": queue, "target": target_config("callback", down)}],
            reconcile={"early_wake": early_wake})
        async with hipq_daemon(config, workdir, name,
                               py_spy=workdir if py_spy else None) as daemon, \
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200)) as session:
            lag = await _offer(session, f"{daemon.base_url}/v1/jobs/{queue}", total, rate, sent,
                               answered)
            conn = await asyncpg.connect(url)
            try:
                archived = await wait_archived(conn, queue, total, within)
                rows = await conn.fetch(
                    "SELECT id, extract(epoch FROM created_at)::float8 AS created, "
                    "extract(epoch FROM launched_at)::float8 AS launched, "
                    "extract(epoch FROM finished_at)::float8 AS finished, status "
                    "FROM archived_jobs WHERE queue = $1", queue)
            finally:
                await conn.close()
            async with session.get(f"{down}/_dump") as answer:
                seen: dict[str, dict[str, float]] = await answer.json()
            peak, cpu_s = daemon.rss.peak_mb, daemon.rss.cpu_s
    await drop_database(server, db)
    measured = {f"j{i}" for i in range(skip, total)}
    put_ms = [(answered[j] - sent[j]) * 1000 for j in measured]
    accepted_rate = len(measured) / (max(answered[j] for j in measured)
                                     - min(sent[j] for j in measured))
    enq_launch, resp_archived, db_enq_launch = [], [], []
    for row in rows:
        job, times = row["id"], seen.get(row["id"], {})
        if job not in measured or "launch" not in times or "cb_sent" not in times:
            continue
        enq_launch.append((times["launch"] - sent[job]) * 1000)
        resp_archived.append((row["finished"] - times["cb_sent"]) * 1000)
        db_enq_launch.append((row["launched"] - row["created"]) * 1000)
    out = {
        "early_wake": early_wake, "offered_jobs_per_s": rate, "seconds": seconds,
        "warmup_seconds": warmup, "jobs": total, "measured": len(measured),
        "archived": archived, "max_send_lag_ms": round(lag * 1000, 1),
        "enqueue_answered_jobs_per_s": round(accepted_rate, 1),
        # the daemon kept up when the PUTs were answered about as fast as they were sent
        "kept_up": accepted_rate >= 0.95 * rate, "enqueue_put_ms": pcts(put_ms),
        "enqueue_to_launch_ms": pcts(enq_launch),
        "response_to_archived_ms": pcts(resp_archived),
        "db_created_to_launched_at_ms": pcts(db_enq_launch),
        "peak_rss_mb": round(peak, 1), "daemon_cpu_s": round(cpu_s, 1),
        "loadavg_before": load_before, "loadavg_after": loadavg(),
    }
    log(f"  {name}: enqueue->launch p50/p99 {out['enqueue_to_launch_ms']['p50']}/"
        f"{out['enqueue_to_launch_ms']['p99']} ms, response->archived p50/p99 "
        f"{out['response_to_archived_ms']['p50']}/{out['response_to_archived_ms']['p99']} ms")
    return out


async def _offer(session: aiohttp.ClientSession, base: str, total: int, rate: float,
                 sent: dict[str, float], answered: dict[str, float]) -> float:
    """Open-loop sender: job i is sent at start + i/rate whatever the answers do.
    Returns the largest delay of a send behind its schedule (client saturation)."""
    tasks: list[asyncio.Task[None]] = []
    errors: list[int] = []
    start = time.monotonic() + 0.05
    lag = 0.0

    async def put(job: str) -> None:
        sent[job] = time.time()
        async with session.put(f"{base}/{job}", json={"data": {}}) as answer:
            await answer.read()
            answered[job] = time.time()
            if answer.status != 201:
                errors.append(answer.status)

    for i in range(total):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            lag = max(lag, -delay)
        tasks.append(asyncio.create_task(put(f"j{i}")))
    await asyncio.gather(*tasks)
    if errors:
        raise SystemExit(f"{len(errors)} enqueues failed, e.g. HTTP {errors[0]}")
    return lag


# -- 3. memory ---------------------------------------------------------------------------


async def memory(server: str, workdir: Path, *, queued: int, running: int,
                 within: float) -> dict[str, Any]:
    """Peak RSS of ``hipq run`` with ``queued`` jobs waiting and ``running`` jobs launched
    to a downstream that accepts (202) and never calls back. The jobs are bulk-loaded
    with SQL (hipq.testing.bulk_insert_jobs_sql) into a paused queue of concurrency
    ``running``; the daemon starts, idles 3 s, the queue is resumed, and it runs until
    ``running`` launches are confirmed, then 6 s more (one interval tick at least)."""
    db = "bench_memory"
    url = await fresh_database(server, db)
    queue = "mem"
    await migrate_database(url)
    conn = await asyncpg.connect(url)
    t_load = time.monotonic()
    await conn.execute(bulk_insert_jobs_sql(), queue, datetime.now(UTC), 1, queued + running)
    await conn.execute("ANALYZE")
    load_s = time.monotonic() - t_load
    load_before = loadavg()
    try:
        async with downstream("accept") as down:
            config = hipq_config(url, free_port(), [{
                "id": queue, "paused": True, "concurrency": running,
                "target": target_config("callback", down)}])
            async with hipq_daemon(config, workdir, "memory") as daemon:
                started = time.time()
                await asyncio.sleep(3)
                idle = daemon.rss.peak_between(started, time.time())
                async with aiohttp.ClientSession() as session, session.post(
                        f"{daemon.base_url}/v1/jobs/{queue}/resume") as answer:
                    answer.raise_for_status()
                resumed = time.monotonic()
                counts = await _wait_running(conn, queue, running, within)
                reached_s = time.monotonic() - resumed
                await asyncio.sleep(6)
                counts = await _job_counts(conn, queue)
                peak, last, cpu_s = daemon.rss.peak_mb, daemon.rss.last_mb, daemon.rss.cpu_s
    finally:
        await conn.close()
        await drop_database(server, db)
    out = {"queued_target": queued, "running_target": running, **counts,
           "load_s": round(load_s, 1), "seconds_to_running": round(reached_s, 1),
           "rss_idle_paused_mb": round(idle, 1), "peak_rss_mb": round(peak, 1),
           "rss_end_mb": round(last, 1), "daemon_cpu_s": round(cpu_s, 1),
           "loadavg_before": load_before,
           "loadavg_after": loadavg()}
    log(f"  memory: peak RSS {peak:.1f} MB ({counts['running']:,} running, "
        f"{counts['queued']:,} queued; paused idle {idle:.1f} MB)")
    return out


async def _job_counts(conn: asyncpg.Connection, queue: str) -> dict[str, int]:
    row = await conn.fetchrow(
        "SELECT count(*) FILTER (WHERE status = 'queued') AS queued, "
        "count(*) FILTER (WHERE status = 'running') AS running, "
        "count(*) FILTER (WHERE status = 'running' AND launch_confirmed) AS confirmed "
        "FROM jobs WHERE queue = $1", queue)
    return {k: int(row[k]) for k in ("queued", "running", "confirmed")}


async def _wait_running(conn: asyncpg.Connection, queue: str, running: int,
                        within: float) -> dict[str, int]:
    deadline = time.monotonic() + within
    counts = await _job_counts(conn, queue)
    while counts["confirmed"] < running and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        counts = await _job_counts(conn, queue)
    return counts

"""The ``sql-enqueue`` phase of bench/run: the speed goals (docs/from-your-database.md, "How fast")
for enqueue from SQL, on a PostgreSQL with stock durability (fsync, synchronous_commit,
full_page_writes on).

Each run gets a fresh database and one ``hipq run`` subprocess with three queues that
have **no target**: their jobs stay queued, so only the enqueue path is measured.

(a) producer: 10,000 jobs with ONE ``hipq.sql.enqueue_many`` in ONE transaction,
    through an asyncpg connection and through a sync SQLAlchemy ``Session`` on the
    psycopg 3 driver (queue ``producer``), each connection opened beforehand: the
    seconds from ``BEGIN`` to the commit returned (goal: under 1 s). The time inside
    ``enqueue_many`` (building the JSON document and the one INSERT) is reported
    apart. The daemon then ingests them; the next step waits until it has.
(b) ingestion: ``--sql-rows`` intake rows (default 50,000) committed in one
    transaction (asyncpg, untimed), ingested by the daemon that owns queue
    ``ingest`` (woken by the notification at commit; 5,000 rows per tick, one tick
    after another). A poll every 10 ms (one probe of the pending index: the smallest
    pending row id; the ids of one INSERT are consecutive) sees the rows go. Rows/s
    from the first ingested to the last: from the first poll that saw rows ingested
    (the first batch of 5,000, not counted) to the first poll that saw none pending.
    Commit -> all ingested is reported beside it (all rows, over a span that adds the
    wake-up, the first batch and up to one poll interval).
(c) the batch API on the same daemon, in the same run: as many jobs with
    ``POST /v1/jobs/api/batch``, 1,000 jobs per call, ``--batch-in-flight`` calls in
    flight (bench/run's default 2), from an aiohttp client in this process, into the
    fresh queue ``api``; the bodies are encoded before the clock starts. Jobs/s from
    the first request sent to the last answer. Goal: (b) >= (c).

(b) and (c) alternate their order from run to run (the jobs table grows by one
step's jobs in between). CPU seconds (user + system, psutil) of the daemon and of
PostgreSQL (the postmaster and its children; bench/roundtrip.py's ``CpuMeter``) over
(b)'s and (c)'s windows. The median of ``--sql-repeat`` runs (default 3) is the
headline of each measure; every run is kept.

Run it alone (JSON on stdout, progress on stderr)::

    .venv/bin/python bench/sql_enqueue.py                      # its own throwaway server
    .venv/bin/python bench/sql_enqueue.py --database-url postgresql://...
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from common import (
    drop_database,
    free_port,
    fresh_database,
    hipq_config,
    hipq_daemon,
    loadavg,
    log,
    machine,
    postgres,
)
from durable_phases import durability
from hipq_scenarios import enqueue_batches
from roundtrip import CpuMeter, postmaster_pid

import hipq.sql

PHASES = ("sql-enqueue",)
PRODUCER, INGEST, BATCH = "producer", "ingest", "api"
POLL_SECONDS = 0.01
WAIT_SECONDS = 300.0
TRANSACTION_GOAL_MS = 1000.0


def job_data(i: int) -> dict[str, Any]:
    """The same data for every path: a small order-like object."""
    return {"order": f"o-{i}", "customer": i % 997, "total_cents": 1000 + i % 5000}


def sql_jobs(prefix: str, count: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i}", "data": job_data(i)} for i in range(count)]


def batch_bodies(prefix: str, count: int, size: int) -> list[bytes]:
    return [json.dumps({"jobs": [{"id": f"{prefix}-{i}", "data": job_data(i)}
                                 for i in range(start, min(start + size, count))]}).encode()
            for start in range(0, count, size)]


# -- (a) one transaction of 10,000 jobs --------------------------------------------------


async def transaction_asyncpg(url: str, count: int, prefix: str) -> dict[str, float]:
    jobs = sql_jobs(prefix, count)
    conn = await asyncpg.connect(url)
    try:
        t0 = time.perf_counter()
        async with conn.transaction():
            await hipq.sql.enqueue_many(conn, PRODUCER, jobs)
            t1 = time.perf_counter()
        t2 = time.perf_counter()
    finally:
        await conn.close()
    return {"begin_to_commit_s": round(t2 - t0, 4), "enqueue_many_s": round(t1 - t0, 4),
            "commit_s": round(t2 - t1, 4)}


def transaction_sqlalchemy(url: str, count: int, prefix: str) -> dict[str, float]:
    """A sync ``Session`` on ``postgresql+psycopg``; the pool's connection is opened
    (and the dialect initialised) before the clock starts."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    jobs = sql_jobs(prefix, count)
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1),
                           pool_size=1)
    try:
        with engine.connect() as warm:
            warm.execute(text("SELECT 1"))
        with Session(engine) as session:
            t0 = time.perf_counter()
            with session.begin():
                hipq.sql.enqueue_many(session, PRODUCER, jobs)
                t1 = time.perf_counter()
            t2 = time.perf_counter()
    finally:
        engine.dispose()
    return {"begin_to_commit_s": round(t2 - t0, 4), "enqueue_many_s": round(t1 - t0, 4),
            "commit_s": round(t2 - t1, 4)}


# -- (b) ingestion ------------------------------------------------------------------------


async def pending_head(conn: asyncpg.Connection, queue: str, since: int = 0) -> int | None:
    """The smallest pending row id of ``queue`` at or after ``since`` (one probe of
    the pending index, from ``since`` on)."""
    # ORDER BY .. LIMIT 1, not min(id): on a table never analysed, the generic plan
    # of min(id) aggregates every pending row (10,000 heap fetches a poll)
    value = await conn.fetchval("SELECT id FROM job_intake WHERE queue = $1 AND error IS NULL "
                                "AND id >= $2 ORDER BY id LIMIT 1", queue, since)
    return None if value is None else int(value)


async def wait_ingested(conn: asyncpg.Connection, queue: str, within: float,
                        seen: list[tuple[float, int | None]] | None = None,
                        since: int = 0) -> float:
    """Poll until no row of ``queue`` from id ``since`` on is pending (each poll's
    time and head in ``seen``); the ``time.time()`` it was seen."""
    deadline = time.monotonic() + within
    while True:
        head = await pending_head(conn, queue, since)
        since = since if head is None else head  # rows only go: the head never moves back
        now = time.time()
        if seen is not None:
            seen.append((now, head))
        if head is None:
            return now
        if time.monotonic() > deadline:
            raise SystemExit(f"the intake of {queue!r} was not ingested within {within:g} s")
        await asyncio.sleep(POLL_SECONDS)


async def ingestion(conn: asyncpg.Connection, meter: CpuMeter, rows: int) -> dict[str, Any]:
    jobs = sql_jobs("sql", rows)
    async with conn.transaction():
        await hipq.sql.enqueue_many(conn, INGEST, jobs)
        first_id = await pending_head(conn, INGEST)
    committed = time.time()  # the clock starts at the commit: the daemon wakes on it
    meter.start()
    seen: list[tuple[float, int | None]] = []
    done = await wait_ingested(conn, INGEST, WAIT_SECONDS, seen, since=first_id or 0)
    cpu = dict(meter.stop())
    stored = await conn.fetchval("SELECT count(*) FROM jobs WHERE queue = $1", INGEST)
    rejected = await conn.fetchval(
        "SELECT count(*) FROM job_intake WHERE queue = $1 AND error IS NOT NULL", INGEST)
    if stored != rows or rejected or first_id is None:
        raise SystemExit(f"ingestion: {stored} jobs and {rejected} rejected rows "
                         f"from {rows} intake rows")
    # the first poll that saw rows ingested: how many, and when
    at, head = next((t, h) for t, h in seen if h is None or h > first_id)
    before = rows if head is None else head - first_id
    out: dict[str, Any] = {"rows": rows, "first_seen_ingested": before}
    if done > at:
        out.update(first_to_last_s=round(done - at, 3),
                   rows_per_s=round((rows - before) / (done - at), 1))
    else:  # all in one poll interval: nothing to time from the first to the last
        out.update(first_to_last_s=0.0, rows_per_s=None)
    out.update(commit_to_ingested_s=round(done - committed, 3),
               rows_per_s_from_commit=round(rows / (done - committed), 1),
               first_seen_s=round(at - committed, 3), polls=len(seen), cpu_s=cpu)
    return out


# -- (c) the batch API ----------------------------------------------------------------------


async def batch_api(base: str, conn: asyncpg.Connection, meter: CpuMeter, jobs: int,
                    in_flight: int) -> dict[str, Any]:
    bodies = batch_bodies("api", jobs, 1000)
    async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max(in_flight, 10))) as session:
        meter.start()
        t0 = time.perf_counter()
        created = await enqueue_batches(session, base, BATCH, bodies, in_flight)
        elapsed = time.perf_counter() - t0
        cpu = dict(meter.stop())
    stored = await conn.fetchval("SELECT count(*) FROM jobs WHERE queue = $1", BATCH)
    if created != jobs or stored != jobs:
        raise SystemExit(f"batch API: {created} created, {stored} stored of {jobs}")
    return {"jobs": jobs, "batch_size": 1000, "in_flight": in_flight,
            "seconds": round(elapsed, 3), "jobs_per_s": round(jobs / elapsed, 1), "cpu_s": cpu}


# -- one run ----------------------------------------------------------------------------------


async def one_run(server: str, workdir: Path, *, rows: int, transaction_jobs: int,
                  in_flight: int, rep: int) -> dict[str, Any]:
    name = f"bench_sql_enqueue_{rep}"
    url = await fresh_database(server, name)
    queues = [{"id": q} for q in (PRODUCER, INGEST, BATCH)]  # no target: nothing launches
    config = hipq_config(url, free_port(), queues)
    load_before = loadavg()
    postmaster = await postmaster_pid(server)
    async with hipq_daemon(config, workdir, f"sql_enqueue_{rep}") as daemon:
        meter = CpuMeter(hipq=(daemon.pid, False), postgres=(postmaster, True))
        conn = await asyncpg.connect(url)
        try:
            out: dict[str, Any] = {"asyncpg": await transaction_asyncpg(
                url, transaction_jobs, "ta")}
            await wait_ingested(conn, PRODUCER, WAIT_SECONDS)  # not to overlap the next
            out["sqlalchemy_psycopg"] = await asyncio.to_thread(
                transaction_sqlalchemy, url, transaction_jobs, "ts")
            await wait_ingested(conn, PRODUCER, WAIT_SECONDS)
            steps = ["ingestion", "batch_api"] if rep % 2 == 0 else ["batch_api", "ingestion"]
            for step in steps:
                out[step] = (await ingestion(conn, meter, rows) if step == "ingestion" else
                             await batch_api(daemon.base_url, conn, meter, rows, in_flight))
            out["order"] = steps
        finally:
            await conn.close()
        out["daemon_peak_rss_mb"] = round(daemon.rss.peak_mb, 1)
    await drop_database(server, name)
    out.update(loadavg_before=load_before, loadavg_after=loadavg())
    log(f"    run {rep}: 10k in one transaction asyncpg "
        f"{out['asyncpg']['begin_to_commit_s']:.3f} s, SQLAlchemy+psycopg "
        f"{out['sqlalchemy_psycopg']['begin_to_commit_s']:.3f} s; ingestion "
        f"{out['ingestion']['rows_per_s']:,.0f} rows/s, batch API "
        f"{out['batch_api']['jobs_per_s']:,.0f} jobs/s")
    return out


def ingest_rate(run: dict[str, Any]) -> float:
    """Rows/s from the first ingested to the last; from the commit when the rows went
    too fast for two polls to tell (tiny ``--sql-rows``)."""
    ingestion = run["ingestion"]
    return float(ingestion["rows_per_s"] or ingestion["rows_per_s_from_commit"])


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def every(step: str, key: str) -> list[float]:
        return [r[step][key] for r in runs]

    def med(values: list[float]) -> float:
        return round(statistics.median(values), 4)

    every_run = {
        "asyncpg_begin_to_commit_s": every("asyncpg", "begin_to_commit_s"),
        "sqlalchemy_psycopg_begin_to_commit_s": every("sqlalchemy_psycopg", "begin_to_commit_s"),
        "ingest_rows_per_s": [ingest_rate(r) for r in runs],
        "ingest_rows_per_s_from_commit": every("ingestion", "rows_per_s_from_commit"),
        "batch_api_jobs_per_s": every("batch_api", "jobs_per_s"),
        "ingest_over_batch_api": [round(ingest_rate(r) / r["batch_api"]["jobs_per_s"], 3)
                                  for r in runs],
    }
    return {**{key: med(values) for key, values in every_run.items()}, "all": every_run}


async def measure(server: str, workdir: Path, *, rows: int, transaction_jobs: int,
                  in_flight: int, repeat: int) -> dict[str, Any]:
    runs = [await one_run(server, workdir, rows=rows, transaction_jobs=transaction_jobs,
                          in_flight=in_flight, rep=rep) for rep in range(repeat)]
    return {"rows": rows, "transaction_jobs": transaction_jobs, "repeat": repeat,
            "postgres": await durability(server), "machine": machine(),
            "median": medians(runs), "runs": runs}


# -- the bench/run phase ------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sql-rows", type=int, default=50000,
                   help="sql-enqueue: intake rows ingested, and jobs through the batch API")
    p.add_argument("--sql-transaction-jobs", type=int, default=10000,
                   help="sql-enqueue: jobs in the one timed enqueue_many transaction")
    p.add_argument("--sql-repeat", type=int, default=3,
                   help="sql-enqueue: runs (median reported)")


async def run_phase(args: argparse.Namespace, workdir: Path,
                    notes: list[str]) -> dict[str, Any]:
    """The ``sql-enqueue`` phase of bench/run, on its own stock-durability server."""
    if "sql-enqueue" not in args.only:
        return {}
    rows, repeat = (10000, 1) if args.quick else (args.sql_rows, args.sql_repeat)
    log("sql-enqueue (stock durability) ...")
    started = time.monotonic()
    with postgres(args.durable_database_url, durable=True) as server:
        try:
            result = await measure(server, workdir, rows=rows,
                                   transaction_jobs=args.sql_transaction_jobs,
                                   in_flight=args.batch_in_flight, repeat=repeat)
        except SystemExit as exc:  # one failed phase does not lose the others
            log(f"  sql-enqueue failed: {exc}")
            notes.append(f"sql-enqueue failed: {exc}")
            result = {"failed": str(exc)}
    result["phase_s"] = round(time.monotonic() - started, 1)
    if rows != 50000 or repeat != 3:
        notes.append(f"sql-enqueue: {rows:,} rows, {repeat} run(s) (default 50,000, 3)")
    out = {"sql-enqueue": result}
    if "postgres" in result:  # the server's settings, when no other phase gives them
        out["postgres_durable"] = result["postgres"]
    return out


HEADLINES = {  # results.json key -> key of the phase's medians
    "sql_enqueue_asyncpg_ms": "asyncpg_begin_to_commit_s",
    "sql_enqueue_sqlalchemy_ms": "sqlalchemy_psycopg_begin_to_commit_s",
    "sql_ingest_rows_per_s": "ingest_rows_per_s",
    "sql_batch_api_jobs_per_s": "batch_api_jobs_per_s",
    "sql_ingest_over_batch_api": "ingest_over_batch_api",
}


def summary(details: dict[str, Any]) -> dict[str, Any]:
    """Headline keys for results.json (None when the phase did not run)."""
    head = details.get("sql-enqueue", {}).get("median", {})
    out = {key: head.get(name) for key, name in HEADLINES.items()}
    for key in ("sql_enqueue_asyncpg_ms", "sql_enqueue_sqlalchemy_ms"):
        out[key] = None if out[key] is None else round(1000 * out[key], 1)
    return out


TARGETS: list[tuple[str, str, str, float | None]] = [
    # enqueue from SQL (docs/from-your-database.md), stock durability
    ("sql_enqueue_asyncpg_ms", "10k jobs, one enqueue_many transaction, asyncpg (ms)", "<",
     TRANSACTION_GOAL_MS),
    ("sql_enqueue_sqlalchemy_ms", "  same, SQLAlchemy Session + psycopg (ms)", "<",
     TRANSACTION_GOAL_MS),
    ("sql_ingest_rows_per_s", "intake ingestion, first to last row (rows/s)", "", None),
    ("sql_batch_api_jobs_per_s", "  batch API enqueue, same daemon (jobs/s)", "", None),
    ("sql_ingest_over_batch_api", "intake ingestion / batch API enqueue", ">=", 1),
]


def print_table(details: dict[str, Any]) -> None:
    result = details.get("sql-enqueue")
    if not result or "failed" in result:
        return
    pg, head = result["postgres"], result["median"]
    print("\nenqueue from SQL (docs/from-your-database.md), "
          f"PostgreSQL {pg['server_version'].split()[0]} "
          f"(fsync {pg['fsync']}, synchronous_commit {pg['synchronous_commit']}), "
          f"median of {result['repeat']}: ingestion {head['ingest_rows_per_s']:,.0f} rows/s "
          f"vs batch API {head['batch_api_jobs_per_s']:,.0f} jobs/s "
          f"({head['ingest_over_batch_api']:.2f}x)")
    for number, run in enumerate(result["runs"]):
        a, s, i, b = run["asyncpg"], run["sqlalchemy_psycopg"], run["ingestion"], run["batch_api"]
        rate = "-" if i["rows_per_s"] is None else f"{i['rows_per_s']:,.0f}"
        print(f"  run {number}: {result['transaction_jobs']:,} jobs in one transaction: asyncpg "
              f"{a['begin_to_commit_s']:.3f} s, SQLAlchemy Session+psycopg "
              f"{s['begin_to_commit_s']:.3f} s")
        print(f"         ingestion {rate} rows/s ({i['rows'] - i['first_seen_ingested']:,} rows "
              f"in {i['first_to_last_s']:.2f} s after the first batch; all {i['rows']:,} "
              f"{i['commit_to_ingested_s']:.2f} s after the commit), CPU s hipq "
              f"{i['cpu_s']['hipq']:.1f} / PG {i['cpu_s']['postgres']:.1f}")
        print(f"         batch API {b['jobs_per_s']:,.0f} jobs/s ({b['jobs']:,} in "
              f"{b['seconds']:.2f} s, {b['in_flight']} in flight), CPU s hipq "
              f"{b['cpu_s']['hipq']:.1f} / PG {b['cpu_s']['postgres']:.1f}; "
              f"order {' then '.join(run['order'])}")


# -- alone ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="bench/sql_enqueue.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--database-url", default=None,
                   help="a PostgreSQL server URL whose role may CREATE DATABASE (default: "
                        "a throwaway server with stock durability)")
    p.add_argument("--rows", type=int, default=50000)
    p.add_argument("--transaction-jobs", type=int, default=10000)
    p.add_argument("--batch-in-flight", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workdir", type=Path,
                   default=Path(f"/tmp/hipq-sql-enqueue-{os.getpid()}"))
    args = p.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)

    async def run() -> dict[str, Any]:
        with postgres(args.database_url, durable=True) as server:
            return await measure(server, args.workdir, rows=args.rows,
                                 transaction_jobs=args.transaction_jobs,
                                 in_flight=args.batch_in_flight, repeat=args.repeat)

    result = asyncio.run(run())
    with contextlib.redirect_stdout(sys.stderr):
        print_table({"sql-enqueue": result})
    sys.stdout.write(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

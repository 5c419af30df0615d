"""The peer: Procrastinate on the same PostgreSQL. Runs in bench/.peer-venv (made by
bench/run), never in hipq's virtualenv.

For each concurrency: empty the jobs table, defer ``--jobs`` no-op jobs in bulk
(``batch_defer_async``, chunks of ``--chunk``), ``ANALYZE`` the table, then run one
worker in burst mode (``wait=False``: it stops when no job is left) at that
concurrency and time it (``--max-seconds`` caps it: the rate is then the jobs done
in that time). Prints one JSON line.

Why ``ANALYZE``: right after ``TRUNCATE`` and a bulk insert the planner still
believes the table is empty, and Procrastinate's fetch query then runs about 4x
slower (about 110 instead of 410 jobs/s at 20,000 jobs on a 2-core machine);
autovacuum would fix the statistics in production, so the peer gets the fair,
faster number.

    bench/.peer-venv/bin/python bench/peer_procrastinate.py --database-url URL
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from importlib.metadata import version
from typing import Any

import procrastinate
import psycopg

CHUNK = 1000


def make_app(url: str, pool_size: int) -> procrastinate.App:
    connector = procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=pool_size)
    app = procrastinate.App(connector=connector)

    @app.task(name="noop", queue="bench")
    async def noop() -> None:
        return None

    return app


async def one_run(url: str, jobs: int, concurrency: int, chunk: int,
                  max_seconds: float | None, analyze: bool = False) -> dict[str, Any]:
    # a pool large enough for every job slot plus the worker's own connections
    app = make_app(url, pool_size=concurrency + 5)
    async with app.open_async():
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute("TRUNCATE procrastinate_jobs CASCADE")
        noop = app.tasks["noop"]
        t0 = time.perf_counter()
        for start in range(0, jobs, chunk):
            await noop.batch_defer_async(*({} for _ in range(start, min(start + chunk, jobs))))
        defer_s = time.perf_counter() - t0
        if analyze:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute("ANALYZE procrastinate_jobs")
        t1 = time.perf_counter()
        worker = asyncio.create_task(app.run_worker_async(
            queues=["bench"], concurrency=concurrency, wait=False,
            install_signal_handlers=False, listen_notify=False))
        done, _ = await asyncio.wait({worker}, timeout=max_seconds)
        if not done:  # cancelling asks the worker to stop gracefully (running jobs finish)
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        work_s = time.perf_counter() - t1
        async with await psycopg.AsyncConnection.connect(url) as conn:
            cur = await conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) "
                "FROM procrastinate_jobs")
            row = await cur.fetchone()
            assert row is not None
            succeeded, total = int(row[0]), int(row[1])
    return {"concurrency": concurrency, "jobs": jobs, "succeeded": succeeded, "total": total,
            "defer_s": round(defer_s, 3), "defer_jobs_per_s": round(jobs / defer_s, 1),
            "work_s": round(work_s, 3), "all_done": succeeded == jobs,
            "jobs_per_s": round(succeeded / work_s, 1)}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    async with await psycopg.AsyncConnection.connect(args.database_url) as conn:
        cur = await conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL")
        row = await cur.fetchone()
    if not (row and row[0]):
        app = make_app(args.database_url, pool_size=2)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
    runs = [await one_run(args.database_url, args.jobs, c, args.chunk, args.max_seconds,
                          args.analyze)
            for c in args.concurrency]
    return {"procrastinate": version("procrastinate"), "psycopg": version("psycopg"),
            "psycopg_impl": psycopg.pq.__impl__, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--chunk", type=int, default=CHUNK)
    parser.add_argument("--concurrency", default="10,50")
    parser.add_argument("--no-analyze", dest="analyze", action="store_false",
                        help="do not ANALYZE the jobs table after deferring")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="stop each worker after this long (rate = succeeded / time)")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    print(json.dumps(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()

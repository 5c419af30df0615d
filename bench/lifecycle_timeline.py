"""Where the durable python-target lifecycle's time goes: the same run as
``bench/run``'s ``lifecycle-durable`` (20,000 jobs over the batch API, 2 requests in
flight, a fresh database and ``hipq run`` each time), printed as a timeline of when
jobs were enqueued (``created_at``) and archived (``finished_at``, the time of the
tick that ran them), read from ``archived_jobs`` after the run (no probe during it).
Variants, each run in turn ``--repeat`` times so they see the same machine:

    .venv/bin/python bench/lifecycle_timeline.py --url postgresql://... \\
        [--variant NAME:FETCH_LIMIT:INDEX+INDEX ...] [--repeat 4] [--in-tick] [--bins]

A variant's indexes are dropped after the daemon's migration, before the run (to
see what an index costs the enqueue and the archive, not as a way to run hipq); its
fetch limit is ``reconcile.fetch_limit`` (0: the default). Prints one JSON line per
run and the median of each variant's "all archived" time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
import asyncpg
from common import BENCH, drop_database, free_port, fresh_database, hipq_config, hipq_daemon
from hipq_scenarios import batch_bodies, enqueue_batches, target_config, wait_archived

BIN_SECONDS = 0.025


async def once(server: str, workdir: Path, *, target: str, fetch_limit: int,
               drop: list[str], jobs: int, bins: bool) -> dict[str, Any]:
    url = await fresh_database(server, "bench_timeline")
    reconcile = {"fetch_limit": fetch_limit} if fetch_limit else None
    config = hipq_config(url, free_port(), [{"id": "lc", "target": target_config(target, None)}],
                         reconcile)
    async with hipq_daemon(config, workdir, "timeline") as daemon:
        conn = await asyncpg.connect(url)
        try:
            for index in drop:
                await conn.execute(f'DROP INDEX "{index}"')
            async with aiohttp.ClientSession() as session:
                bodies = batch_bodies(jobs, 1000, "t")
                t0 = time.time()
                await enqueue_batches(session, daemon.base_url, "lc", bodies, 2)
                enqueued = time.time() - t0
            await wait_archived(conn, "lc", jobs, 60)
            rows = await conn.fetch(
                "SELECT extract(epoch FROM created_at)::float8 AS c, "
                "extract(epoch FROM finished_at)::float8 AS f FROM archived_jobs")
        finally:
            await conn.close()
    await drop_database(server, "bench_timeline")
    last = max(r["f"] for r in rows) - t0
    out: dict[str, Any] = {"enqueued_s": round(enqueued, 3), "all_archived_s": round(last, 3),
                           "jobs_per_s": round(len(rows) / last, 1)}
    if bins:
        count = int(last / BIN_SECONDS) + 1
        made, done = [0] * count, [0] * count
        for r in rows:
            made[min(count - 1, max(0, int((r["c"] - t0) / BIN_SECONDS)))] += 1
            done[min(count - 1, max(0, int((r["f"] - t0) / BIN_SECONDS)))] += 1
        out["bins"] = {"seconds": BIN_SECONDS, "enqueued": made, "archived": done}
    return out


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="a PostgreSQL server URL")
    p.add_argument("--variant", action="append", default=[],
                   help="NAME:FETCH_LIMIT:INDEX+INDEX (default: one variant, as configured)")
    p.add_argument("--repeat", type=int, default=4)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--in-tick", action="store_true", help="the Python target with in_tick")
    p.add_argument("--bins", action="store_true", help="print the timeline's 25 ms bins")
    p.add_argument("--workdir", type=Path, default=BENCH / ".logs")
    args = p.parse_args()
    variants = []
    for spec in args.variant or ["as-is:0:"]:
        name, limit, indexes = [*spec.split(":"), "", ""][:3]
        variants.append((name, int(limit or 0), [i for i in indexes.split("+") if i]))
    args.workdir.mkdir(parents=True, exist_ok=True)
    target = "python-in-tick" if args.in_tick else "python"
    seconds: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for rep in range(args.repeat):
        for name, limit, drop in variants:
            run = await once(args.url, args.workdir, target=target, fetch_limit=limit,
                             drop=drop, jobs=args.jobs, bins=args.bins)
            seconds[name].append(run["all_archived_s"])
            print(json.dumps({"variant": name, "rep": rep, **run}), flush=True)
    print(json.dumps({"median_all_archived_s": {
        name: round(statistics.median(values), 3) for name, values in seconds.items()}}))


if __name__ == "__main__":
    asyncio.run(main())

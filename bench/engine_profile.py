"""The engine alone, in one process: enqueue N jobs through the Python API and run
reconcile ticks until every job is archived, with a python target that completes at
once. No HTTP, no subprocess: where the daemon's CPU goes per job.

    .venv/bin/python bench/engine_profile.py --url postgresql://... [--jobs 20000]
        [--profile out.pstats] [--in-tick]

``--url`` is a server URL (a database ``bench_engine`` is created on it); without it a
throwaway PostgreSQL is started. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import drop_database, fresh_database, postgres

from hipq.bodies import EnqueueRequest
from hipq.clock import SystemClock
from hipq.config import QueueConfig, ReconcileConfig
from hipq.engine import Reconciler
from hipq.service import Hipq
from hipq.store import open_store


async def run(server: str, jobs: int, chunk: int, fetch_limit: int,
              profile: str | None, analyze: bool = False,
              in_tick: bool = False) -> dict[str, object]:
    url = await fresh_database(server, "bench_engine")
    store = await open_store(url.replace("postgresql://", "postgresql+asyncpg://", 1))
    await store.migrate()
    clock = SystemClock()
    service = Hipq(store, clock=clock)
    await service.create_queue(QueueConfig.model_validate({
        "id": "q", "target": {"kind": "python", "function": "bench_targets:done",
                              "in_tick": in_tick}}))
    reconciler = Reconciler(store, clock=clock, owner="bench",
                            config=ReconcileConfig(fetch_limit=fetch_limit))
    requests = [(f"j{i}", EnqueueRequest.model_validate({"data": {"n": i}}))
                for i in range(jobs)]
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, jobs, chunk):
        await service.enqueue_many("q", requests[start:start + chunk])
    if analyze:  # planner statistics, as a busy table has them
        async with store.engine.connect() as conn:
            await conn.exec_driver_sql("ANALYZE")
    t_enq, c_enq = time.perf_counter(), time.process_time()
    ticks = 0
    while True:
        result = await reconciler.run_once()
        ticks += 1
        await reconciler.drain()
        if not reconciler.batch and not result.changed:
            stats = await store.queue_stats(now=clock.now())
            if all(s.queued == 0 and s.running == 0 for s in stats):
                break
    t_done, c_done = time.perf_counter(), time.process_time()
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
    await store.close()
    await drop_database(server, "bench_engine")
    return {"jobs": jobs, "enqueue_jobs_per_s": round(jobs / (t_enq - t0)),
            "process_jobs_per_s": round(jobs / (t_done - t_enq)),
            "lifecycle_jobs_per_s": round(jobs / (t_done - t0)), "ticks": ticks,
            # this process's CPU per job in each phase (the rest of the time is
            # PostgreSQL's, or waiting for it)
            "enqueue_cpu_us_per_job": round((c_enq - c0) * 1e6 / jobs, 1),
            "process_cpu_us_per_job": round((c_done - c_enq) * 1e6 / jobs, 1),
            "fetch_limit": fetch_limit, "in_tick": in_tick}


def _time_store() -> dict[str, list[float]]:
    """Wrap every public coroutine of the store drivers to sum its wall time."""
    import functools
    import inspect

    from hipq.store.postgres import PostgresStore
    from hipq.store.sqlite import SQLiteStore
    spent: dict[str, list[float]] = {}
    for cls in (PostgresStore, SQLiteStore):
        for name in dir(cls):
            fn = getattr(cls, name)
            if name.startswith("_") or not inspect.iscoroutinefunction(fn):
                continue

            def wrap(fn=fn, name=name):  # type: ignore[no-untyped-def]
                @functools.wraps(fn)
                async def timed(*a, **k):  # type: ignore[no-untyped-def]
                    t = time.perf_counter()
                    try:
                        return await fn(*a, **k)
                    finally:
                        cell = spent.setdefault(name, [0.0, 0])
                        cell[0] += time.perf_counter() - t
                        cell[1] += 1
                return timed
            setattr(cls, name, wrap())
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--chunk", type=int, default=1000)
    parser.add_argument("--fetch-limit", type=int, default=ReconcileConfig().fetch_limit)
    parser.add_argument("--profile")
    parser.add_argument("--analyze", action="store_true",
                        help="ANALYZE after enqueueing (process a table with statistics)")
    parser.add_argument("--time-store", action="store_true")
    parser.add_argument("--in-tick", action="store_true",
                        help="the Python target with in_tick: true (hipq.engine.inline)")
    args = parser.parse_args()
    spent = _time_store() if args.time_store else None
    with postgres(args.url) as server:
        out = asyncio.run(run(server, args.jobs, args.chunk, args.fetch_limit, args.profile,
                             args.analyze, args.in_tick))
    if spent is not None:
        out["store_s"] = {k: [round(v[0], 3), v[1]] for k, v in
                          sorted(spent.items(), key=lambda kv: -kv[1][0])}
    print(json.dumps(out))


if __name__ == "__main__":
    main()

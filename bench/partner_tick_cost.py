"""What a partner's accounting costs a tick (docs/throttling.md, "Partners": buckets
change with the launches and ends of a tick, never recomputed from history; issue:
< 5% of tick CPU with 20 queues on one partner and 10,000 due jobs).

20 queues naming one partner (a concurrency, a request bucket, a cost bucket with
the cost read from each job's data: every part of the accounting runs, none
binds), 10,000 due jobs spread over them, an in-memory target whose tries succeed
at once (so every tick launches, ends and settles). Each tick's process CPU time is
measured; inside it, the partner's accounting is timed where it runs
(``Budgets.admit``, ``ended``, ``order``, ``next_room``, ``reported`` and
``PartnerWord.keep_budgets``). The store is the in-memory one by default (the
tick's own work is smallest there, so the share is the largest: a floor), SQLite
with ``--sqlite``. Prints one JSON document.

    .venv/bin/python bench/partner_tick_cost.py [--jobs 10000] [--ticks 40] [--sqlite]
        [--postgres SERVER_URL]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import drop_database, fresh_database  # bench/ is on sys.path as a script

from hipq.bodies import EnqueueRequest
from hipq.clock import SystemClock
from hipq.config import PartnerConfig, QueueConfig, ReconcileConfig
from hipq.engine import Reconciler
from hipq.engine.budgets import Budgets
from hipq.engine.partner_word import PartnerWord
from hipq.service import Hipq
from hipq.store import open_store
from hipq.targets import Targets
from hipq.testing import MemoryTarget, succeed

QUEUES = 20
TIMED = ((Budgets, ("admit", "ended", "order", "next_room", "reported")),
         (PartnerWord, ("keep_budgets",)))


class Timed:
    """Adds up the time spent in the methods it wraps."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()  # the process's CPU, as the tick's is measured
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - start
        return timed


async def measure(url: str, jobs: int, ticks: int) -> dict[str, Any]:
    store = await open_store(url)
    await store.migrate()
    clock = SystemClock()
    hipq = Hipq(store, clock=clock)
    names = [f"q{n:02d}" for n in range(QUEUES)]
    for name in names:
        await hipq.create_queue(QueueConfig(id=name, target={"kind": "memory", "name": "t"},
                                            partner="llm"))
    for start in range(0, jobs, 1000):
        for name in names:
            await hipq.enqueue_many(name, [
                (f"{name}-{i:06d}", EnqueueRequest(data={"tokens": 100 + i % 50}))
                for i in range(start, min(start + 1000, jobs)) if i % QUEUES == int(name[1:])])
    partner = PartnerConfig.model_validate({
        "id": "llm", "concurrency": 1_000_000,
        "limits": [{"requests": 1e9, "per_seconds": 60}, {"cost": 1e12, "per_seconds": 60}],
        "cost": {"estimate": "tokens"}}).to_spec()
    reconciler = Reconciler(store, clock=clock, owner="bench",
                            config=ReconcileConfig(fetch_limit=25),
                            targets=Targets(memory={"t": MemoryTarget(succeed)}),
                            partners={"llm": partner})
    timer = Timed()
    originals = []
    for cls, methods in TIMED:
        for name in methods:
            original = getattr(cls, name)
            originals.append((cls, name, original))
            setattr(cls, name, timer.wrap(original))
    cpu: list[float] = []
    spent: list[float] = []
    launched = 0
    launches: list[int] = []
    try:
        for _ in range(ticks):
            timer.seconds = 0.0
            before = time.process_time()
            result = await reconciler.run_once()
            cpu.append(time.process_time() - before)
            spent.append(timer.seconds)
            launched += result.launched
            launches.append(result.launched)
            await reconciler.drain()
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)
        await store.close()
    busy = [i for i, n in enumerate(launches) if n > 0]  # the ticks that launched
    cpu, spent = [cpu[i] for i in busy], [spent[i] for i in busy]
    shares = [s / c for s, c in zip(spent, cpu, strict=True) if c > 0]
    return {"store": url.split(":", 1)[0], "queues": QUEUES, "due_jobs": jobs,
            "ticks": ticks, "ticks_that_launched": len(busy), "launched": launched,
            "tick_cpu_ms_median": round(statistics.median(cpu) * 1e3, 3),
            "partner_accounting_ms_median": round(statistics.median(spent) * 1e3, 3),
            "partner_share_of_tick_cpu_median": round(statistics.median(shares), 4),
            "partner_share_of_tick_cpu_total": round(sum(spent) / sum(cpu), 4),
            "goal_share": 0.05}


async def on_postgres(server: str, jobs: int, ticks: int) -> dict[str, Any]:
    plain = server.replace("postgresql+asyncpg://", "postgresql://", 1)
    url = await fresh_database(plain, "hipq_partner_tick_cost")
    try:
        return await measure(url.replace("postgresql://", "postgresql+asyncpg://", 1),
                             jobs, ticks)
    finally:
        await drop_database(plain, "hipq_partner_tick_cost")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--ticks", type=int, default=40)
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--postgres", default=None,
                        help="a PostgreSQL server URL (a database is made there and dropped)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.postgres:
            result = asyncio.run(on_postgres(args.postgres, args.jobs, args.ticks))
        else:
            url = (f"sqlite+aiosqlite:///{Path(folder) / 'p.db'}" if args.sqlite
                   else "memory://")
            result = asyncio.run(measure(url, args.jobs, args.ticks))
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

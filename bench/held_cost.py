"""What counting held jobs by reason costs a tick (docs/throttling.md: "none of this makes a
tick cost more than O(what it looked at)"; issue: < 5% of tick CPU at 10,000 due
jobs).

One queue, 10,000 due jobs over 100 tenants, a per-tenant rate limit (so every
tick looks at ``reconcile.fetch_limit`` candidates and launches only what the
budgets allow: the most held jobs a tick can have), an in-memory target whose
launches succeed at once. Each tick's process CPU time is measured; inside it, the
held counting is timed where it runs (``held_reasons`` and ``PartnerWord.held``),
and the throttler's one dict entry per held candidate is priced by ``timeit`` on a
dict of the same size (it cannot be switched off). Prints one JSON document.

    .venv/bin/python bench/held_cost.py [--jobs 10000] [--ticks 30] [--postgres SERVER_URL]

``--postgres``: a PostgreSQL server URL (``postgresql://...``; a database
``hipq_held_cost`` is created there and dropped); without it, a SQLite file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import drop_database, fresh_database  # bench/ is on sys.path as a script

from hipq.bodies import EnqueueRequest
from hipq.clock import SystemClock
from hipq.config import QueueConfig, ReconcileConfig
from hipq.engine import Reconciler
from hipq.engine import partner_word as partner_module
from hipq.engine import selection as selection_module
from hipq.service import Hipq
from hipq.store import open_store
from hipq.targets import Targets
from hipq.testing import MemoryTarget, succeed

QUEUE = "held"
TENANTS = 100


class Timed:
    """Wraps a function, adding up the time spent in it."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.seconds = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


async def measure(url: str, jobs: int, ticks: int) -> dict[str, Any]:
    store = await open_store(url)
    await store.migrate()
    clock = SystemClock()
    hipq = Hipq(store, clock=clock)
    await hipq.create_queue(QueueConfig(
        id=QUEUE, target={"kind": "memory", "name": "t"},
        rate_limit={"launches": 1, "per_seconds": 3600, "by": "tenant"}))
    for start in range(0, jobs, 1000):
        await hipq.enqueue_many(QUEUE, [
            (f"j{i:06d}", EnqueueRequest(data={"tenant": f"t{i % TENANTS}"}))
            for i in range(start, min(start + 1000, jobs))])
    target = MemoryTarget(succeed)
    reconciler = Reconciler(store, clock=clock, owner="bench",
                            config=ReconcileConfig(fetch_limit=2000),
                            targets=Targets(memory={"t": target}))
    reasons = Timed(selection_module.held_reasons)
    word = Timed(partner_module.PartnerWord.held)
    selection_module.held_reasons = reasons  # type: ignore[assignment]
    partner_module.PartnerWord.held = lambda self, *a: word(self, *a)  # type: ignore[method-assign]
    cpu: list[float] = []
    held_seen: list[int] = []
    for _ in range(ticks):
        before = time.process_time()
        await reconciler.run_once()
        cpu.append(time.process_time() - before)
        await reconciler.drain()
        state = (await store.queue_state_list(queues=[QUEUE])).get(QUEUE)
        held_seen.append(sum((state.held or {}).values()) if state else 0)
    await store.close()
    looked = statistics.median(held_seen) or 0
    keys = [f"j{i:06d}" for i in range(max(int(looked), 1))]
    per_entry = timeit.timeit("for k in keys: table[k] = 'rate_limit'",
                              setup="table = {}", globals={"keys": keys},
                              number=200) / 200 / len(keys)
    counted = reasons.seconds + word.seconds + per_entry * looked * ticks
    total = sum(cpu)
    return {"database": url.split(":", 1)[0], "due_jobs": jobs, "ticks": ticks,
            "median_held_per_tick": looked, "tick_cpu_ms_median": statistics.median(cpu) * 1e3,
            "held_counting_ms_per_tick": counted / ticks * 1e3,
            "of_which_held_reasons_ms": reasons.seconds / ticks * 1e3,
            "of_which_partner_held_ms": word.seconds / ticks * 1e3,
            "of_which_throttler_entries_ms": per_entry * looked * 1e3,
            "held_counting_share_of_tick_cpu": counted / total if total else None,
            "goal_share": 0.05}


async def on_postgres(server: str, jobs: int, ticks: int) -> dict[str, Any]:
    plain = server.replace("postgresql+asyncpg://", "postgresql://", 1)
    url = await fresh_database(plain, "hipq_held_cost")
    try:
        return await measure(url.replace("postgresql://", "postgresql+asyncpg://", 1),
                             jobs, ticks)
    finally:
        await drop_database(plain, "hipq_held_cost")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--postgres", default=None,
                        help="a PostgreSQL server URL (default: a SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.postgres:
            result = asyncio.run(on_postgres(args.postgres, args.jobs, args.ticks))
        else:
            url = f"sqlite+aiosqlite:///{Path(folder) / 'held.db'}"
            result = asyncio.run(measure(url, args.jobs, args.ticks))
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

"""Does one reconcile tick's database cost grow with the backlog? (PostgreSQL)

For each backlog size N (``--sizes``, default 1000,100000), in a fresh database:
migrate, create one queue (concurrency 100, an in-memory target whose launches
succeed at once), bulk-load N queued jobs with one ``INSERT ... SELECT
generate_series``, ``ANALYZE``, then run reconcile ticks. Each tick is the steady
state of a busy queue: apply the 100 responses of the previous tick's launches,
archive those jobs, fetch the next 100 due jobs, claim and launch them. Only
``Reconciler.run_once()`` is timed; ``drain()`` (launches and the recording of
their outcomes) and a top-up of 100 new queued jobs (so the backlog stays at N)
run between ticks, untimed.

Prints a table (median / p90 tick ms per size, ratio to the smallest size) and
one JSON line; ``--json-out`` also writes the JSON to a file. The goal (Core
engine issue) is median(100k) within 2x of median(1k).

PostgreSQL: ``--database-url`` or ``HIPQ_BENCH_DATABASE_URL`` (a server URL; the
role must be allowed to CREATE DATABASE: one ``hipq_bench_<n>`` database per
size is created and dropped), else a throwaway server from
``scripts/pg-ephemeral``, stopped at the end.

    .venv/bin/python bench/tick_scaling.py                       # 1k and 100k
    .venv/bin/python bench/tick_scaling.py --sizes 1000,100000,1000000 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
from common import postgres  # bench/ is on sys.path: this file runs as a script
from sqlalchemy import event

from hipq.clock import SystemClock
from hipq.config import QueueConfig, ReconcileConfig
from hipq.engine import Reconciler
from hipq.service import Hipq
from hipq.store import Store, open_store
from hipq.targets import Targets
from hipq.testing import MemoryTarget, bulk_insert_jobs_sql, succeed

ROOT = Path(__file__).resolve().parent.parent
QUEUE = "bench"
CONCURRENCY = 100

def label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


def with_database(server_url: str, database: str) -> str:
    base, _, _ = server_url.rpartition("/")
    return f"{base}/{database}"


def plain_url(url: str) -> str:
    """asyncpg wants ``postgresql://``; accept ``postgresql+asyncpg://`` too."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


# -- per-statement timing (--profile) ---------------------------------------------------


@dataclass
class StatementTimes:
    """Wall time per SQL statement (first line), measured around the driver call:
    asyncpg's query loggers (PostgreSQL), SQLAlchemy's cursor events (SQLite)."""

    enabled: bool = False
    totals: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    current: float = 0.0  # seconds in the driver since the last ``take()``

    def take(self) -> float:
        spent, self.current = self.current, 0.0
        return spent

    def attach(self, store: Store) -> None:
        def _logged(query: Any) -> None:  # asyncpg's query logger
            self._add(query.query, query.elapsed)

        add = getattr(store, "add_query_logger", None)
        if add is not None:  # PostgreSQL: the loggers of the store's pool's connections
            add(_logged)
            return
        engine = store.engine.sync_engine  # SQLite: SQLAlchemy's cursor events

        @event.listens_for(engine, "before_cursor_execute")
        def _before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            conn.info.setdefault("bench_t0", []).append(time.perf_counter())

        @event.listens_for(engine, "after_cursor_execute")
        def _after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            self._add(statement, time.perf_counter() - conn.info["bench_t0"].pop())

    def _add(self, statement: str, spent: float) -> None:
        self.current += spent
        if self.enabled:
            self.totals[" ".join(statement.split())[:110]].append(spent)


# -- one backlog size -----------------------------------------------------------------


@dataclass
class SizeResult:
    size: int
    load_s: float
    ticks_ms: list[float]
    db_ms: list[float]
    launched: list[int]
    queued_after: int
    profile: list[tuple[str, int, float]]

    @property
    def median(self) -> float:
        return statistics.median(self.ticks_ms)

    @property
    def p90(self) -> float:
        return p90(self.ticks_ms)

    @property
    def db_median(self) -> float:
        return statistics.median(self.db_ms)


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


async def admin(server: str, *statements: str) -> None:
    conn = await asyncpg.connect(server)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def run_size(server: str, size: int, args: argparse.Namespace) -> SizeResult:
    database = f"hipq_bench_{size}"
    await admin(server, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)",
                f"CREATE DATABASE {database}")
    url = with_database(server, database)
    store = await open_store(url.replace("postgresql://", "postgresql+asyncpg://", 1))
    raw = await asyncpg.connect(url)
    try:
        return await measure(store, raw, size, args)
    finally:
        await raw.close()
        await store.close()
        if not args.keep:
            await admin(server, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


async def measure(store: Store, raw: asyncpg.Connection, size: int,
                  args: argparse.Namespace) -> SizeResult:
    await store.migrate()
    clock = SystemClock()
    service = Hipq(store, clock=clock)
    await service.create_queue(QueueConfig(id=QUEUE, concurrency=CONCURRENCY,
                                           target={"kind": "memory", "name": "t"}))
    insert = bulk_insert_jobs_sql()
    started = time.perf_counter()
    await raw.execute(insert, QUEUE, clock.now(), 1, size)
    await raw.execute("ANALYZE")
    load_s = time.perf_counter() - started
    print(f"  loaded {size:,} queued jobs in {load_s:.1f}s", file=sys.stderr)

    times = StatementTimes()
    times.attach(store)
    target = MemoryTarget(succeed)
    reconciler = Reconciler(store, clock=clock, owner="bench",
                            config=ReconcileConfig(launch_concurrency=CONCURRENCY),
                            targets=Targets(memory={"t": target}))
    next_id = size + 1
    ticks_ms: list[float] = []
    db_ms: list[float] = []
    launched: list[int] = []
    for tick in range(args.warmup + args.ticks):
        measured = tick >= args.warmup
        times.enabled = measured and args.profile
        times.take()
        t0 = time.perf_counter()
        result = await reconciler.run_once()
        elapsed = time.perf_counter() - t0
        in_db = times.take()
        times.enabled = False
        await reconciler.drain()
        if measured:
            ticks_ms.append(elapsed * 1000)
            db_ms.append(in_db * 1000)
            launched.append(result.launched)
        if result.launched:  # top up: the backlog stays at ``size`` queued jobs
            await raw.execute(insert, QUEUE, clock.now(), next_id,
                              next_id + result.launched - 1)
            next_id += result.launched
    queued_after = await raw.fetchval(
        "SELECT count(*) FROM jobs WHERE status = 'queued' AND queue = $1", QUEUE)
    profile = sorted(((sql, len(ts), sum(ts) * 1000 / len(ts))
                      for sql, ts in times.totals.items()), key=lambda p: -p[1] * p[2])
    return SizeResult(size=size, load_s=load_s, ticks_ms=ticks_ms, db_ms=db_ms,
                      launched=launched, queued_after=int(queued_after), profile=profile)


# -- report ---------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        ram = float("nan")
    return {"cores": os.cpu_count(), "ram_gb": round(ram, 1),
            "platform": platform.platform(), "python": platform.python_version()}


def report(results: list[SizeResult], args: argparse.Namespace,
           pg_version: str) -> dict[str, Any]:
    base = results[0]
    print(f"\nreconcile tick time (run_once), batch {CONCURRENCY}, "
          f"{args.ticks} ticks after {args.warmup} warm-up, PostgreSQL {pg_version}")
    print("(db ms: time spent in the database driver during the tick; the rest is Python)")
    print(f"{'backlog':>10} {'median ms':>10} {'p90 ms':>9} {'min ms':>8} {'max ms':>8} "
          f"{'db median':>10} {'db p90':>8} {'launched':>9} {'ratio':>6} {'db ratio':>9}")
    for r in results:
        print(f"{r.size:>10,} {r.median:>10.2f} {r.p90:>9.2f} {min(r.ticks_ms):>8.2f} "
              f"{max(r.ticks_ms):>8.2f} {r.db_median:>10.2f} {p90(r.db_ms):>8.2f} "
              f"{statistics.mean(r.launched):>9.1f} {r.median / base.median:>6.2f} "
              f"{(r.db_median / base.db_median if base.db_median else float('nan')):>9.2f}")
        if args.profile:
            print(f"  statements at {r.size:,} (calls over {args.ticks} ticks x mean ms), "
                  f"{r.queued_after:,} queued at the end:")
            for sql, calls, mean_ms in r.profile[:14]:
                print(f"    {calls:>5} x {mean_ms:7.2f} ms  {sql}")
    out: dict[str, Any] = {}
    for r in results:
        out[f"tick_ms_{label(r.size)}"] = round(r.median, 3)
        out[f"tick_p90_ms_{label(r.size)}"] = round(r.p90, 3)
        out[f"db_ms_{label(r.size)}"] = round(r.db_median, 3)
    for r in results[1:]:
        name = f"{label(r.size)}_{label(base.size)}"
        out[f"ratio_{name}"] = round(r.median / base.median, 3)
        out[f"db_ratio_{name}"] = round(r.db_median / base.db_median, 3)
    out.update({
        "batch": CONCURRENCY, "ticks": args.ticks, "warmup": args.warmup,
        "sizes": {label(r.size): {
            "median_ms": round(r.median, 3), "p90_ms": round(r.p90, 3),
            "db_median_ms": round(r.db_median, 3), "db_p90_ms": round(p90(r.db_ms), 3),
            "load_s": round(r.load_s, 1), "launched_per_tick": statistics.mean(r.launched),
            "queued_at_end": r.queued_after} for r in results},
        "postgres": pg_version,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
    })
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=os.environ.get("HIPQ_BENCH_DATABASE_URL"),
                        help="PostgreSQL server URL (default: $HIPQ_BENCH_DATABASE_URL, else "
                             "a throwaway server from scripts/pg-ephemeral)")
    parser.add_argument("--sizes", default="1000,100000",
                        help="comma-separated backlog sizes (default: 1000,100000)")
    parser.add_argument("--ticks", type=int, default=30, help="measured ticks per size")
    parser.add_argument("--warmup", type=int, default=3, help="untimed ticks first")
    parser.add_argument("--profile", action="store_true",
                        help="also print the time of each SQL statement of the ticks")
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    parser.add_argument("--json-out", type=Path, help="also write the JSON line here")
    args = parser.parse_args(argv)
    try:
        args.sizes = [int(x.replace("_", "")) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        parser.error("--sizes: comma-separated integers")
    if not args.sizes or min(args.sizes) < 1 or args.ticks < 1 or args.warmup < 0:
        parser.error("sizes and ticks must be positive")
    return args


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with postgres(plain_url(args.database_url) if args.database_url else None) as server:
        conn = await asyncpg.connect(server)
        try:
            pg_version = str(await conn.fetchval("SHOW server_version"))
        finally:
            await conn.close()
        results = []
        for size in args.sizes:
            print(f"backlog {size:,}:", file=sys.stderr)
            results.append(await run_size(server, size, args))
        return report(results, args, pg_version)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = asyncio.run(main_async(args))
    line = json.dumps(out, sort_keys=False)
    print(line)
    if args.json_out:
        args.json_out.write_text(line + "\n")


if __name__ == "__main__":
    main()

"""Plans made while a table was empty are not kept once it fills (PostgreSQL).

asyncpg prepares each statement once per connection, and after five runs PostgreSQL
may keep a generic plan for it, made from the tables' sizes at that moment. A table
vacuumed or analysed while empty (hipq's own ``VACUUM`` of ``jobs`` once a burst has
drained, autovacuum after the inbox was pruned, an operator's ``ANALYZE``) has no
pages and no rows in the catalog; the idle ticks' runs (or a trickle of work, the
table one page) then settle on a plan for a table that small (a sequential scan, even
one per row), kept when the table fills. In a Kafka round trip of 20,000 jobs the
inbox read of a tick took 300-970 ms that way: a scan of the whole inbox for each of
its 2,000 new rows. The due fetch scanned and sorted the backlog, and scanned it
again for each job with an ordering key; the claim scanned it for each job claimed.
The store's connections plan each run for the table as it is
(``plan_cache_mode = force_custom_plan``), unless the database URL names another mode.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from hipq.store import Store, open_store, pg_pool
from hipq.store.pgsql import SQL
from hipq.store.postgres import _fetch
from hipq.testing import FakeClock
from tests.contract._plans import busy_inbox, literal, main_scans, nodes, plan_of
from tests.contract.test_store import make_job

pytestmark = pytest.mark.sql_only  # PostgreSQL's plans

RUNS_WHILE_SMALL = 8  # past the five runs after which PostgreSQL may keep a generic plan
APPLIED = 20_000  # inbox rows of earlier ticks, applied
PENDING = 2_000  # new ones, a page's worth
QUEUED = 20_000  # jobs of the next burst
LIMIT = 100


@asynccontextmanager
async def _pooled(store: Store) -> AsyncIterator[Any]:
    """One of the store's own pooled connections, set up as the daemon's are."""
    async with pg_pool.checkout(store.pool) as conn:  # type: ignore[attr-defined]
        yield conn


async def _run_while_small(conn: Any, name: str, **values: Any) -> str:
    """Run the named statement as idle ticks (or a trickle of work) do, finding
    nothing; the name of its prepared statement on ``conn``."""
    for _ in range(RUNS_WHILE_SMALL):
        assert await _fetch(conn, name, **values) == []
    prepared = await conn.fetchval(
        "SELECT name FROM pg_prepared_statements WHERE statement = $1", SQL[name].sql)
    assert prepared, f"{name} is not a prepared statement of this connection"
    return str(prepared)


async def _plan_now(conn: Any, prepared: str, name: str, **values: Any) -> dict[str, Any]:
    """EXPLAIN ANALYZE of the connection's own prepared statement, as its next run."""
    args = ", ".join(literal(v) for v in SQL[name].args(**values))
    return plan_of(await conn.fetchval(
        f'EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE "{prepared}"({args})'))


def _read(scan: dict[str, Any]) -> int:
    """The rows a scan read (kept and filtered out, every loop)."""
    return int((scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0))
               * scan["Actual Loops"])


def _scans(plan: dict[str, Any], relation: str) -> Iterator[dict[str, Any]]:
    return (n for n in nodes(plan)
            if n.get("Relation Name") == relation and "Scan" in n["Node Type"])


async def _analyze(store: Store, table: str) -> None:
    async with _pooled(store) as conn:
        await conn.execute(f"ANALYZE {table}")


async def test_the_inbox_read_is_planned_for_the_inbox_as_it_is(
        store: Store, clock: FakeClock) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await _analyze(store, "response_inbox")  # while empty: no pages, no rows
    page = {"after_id": 0, "limit": PENDING, "max_chars": 16 * 1024 * 1024}
    async with _pooled(store) as conn:
        prepared = await _run_while_small(conn, "inbox_pending_scan", before=clock.now(),
                                          **page)
        await busy_inbox(store, clock, applied=APPLIED, pending=PENDING)
        plan = await _plan_now(conn, prepared, "inbox_pending_scan",
                               before=clock.advance(1), **page)
    assert plan["Actual Rows"] == PENDING
    read = sum(_read(scan) for scan in _scans(plan, "response_inbox"))
    assert read <= 3 * PENDING, (read, json.dumps(plan, indent=1))


async def test_the_due_fetch_is_planned_for_the_jobs_table_as_it_is(
        store: Store, clock: FakeClock) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    assert await store.jobs_vacuum()  # a burst has drained: hipq vacuums the empty table
    fetch = {"queue": "q", "excluding": [], "after_priority": None, "after_run_at": None,
             "after_id": None, "relaxed": False, "limit": LIMIT}
    async with _pooled(store) as conn:
        prepared = await _run_while_small(conn, "due_time", now=clock.now(), **fetch)
        await store.job_insert_many(
            [make_job(clock, f"b{i:05d}", ordering_key=f"k{i % 50}" if i % 4 == 0 else None,
                      key_order_at=clock.now() if i % 4 == 0 else None)
             for i in range(QUEUED)])
        plan = await _plan_now(conn, prepared, "due_time", now=clock.advance(1), **fetch)
    shown = json.dumps(plan, indent=1)
    assert plan["Actual Rows"] == LIMIT
    assert not [n for n in nodes(plan) if n["Node Type"] == "Seq Scan"], shown
    read = sum(_read(scan) for scan in main_scans(plan, "jobs"))  # the ordering keys'
    # probes (SubPlan) read each key's earlier jobs, as designed
    assert read <= 2 * LIMIT, (read, shown)


async def test_a_claim_is_planned_for_the_jobs_table_as_it_is(
        store: Store, clock: FakeClock) -> None:
    """A trickle after a vacuum of the empty table (one page): a plan made then
    probed each batch row with a sequential scan, and kept it for the next burst."""
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    assert await store.jobs_vacuum()
    await store.job_insert_many([make_job(clock, "trickle")])
    claim = {"queue": "q", "owner": "daemon-a", "heartbeat_seconds": None}
    async with _pooled(store) as conn:
        prepared = await _run_while_small(conn, "claim", ids=["none"], now=clock.now(),
                                          **claim)
        await store.job_insert_many([make_job(clock, f"b{i:05d}") for i in range(QUEUED)])
        transaction = conn.transaction()
        await transaction.start()
        try:
            plan = await _plan_now(conn, prepared, "claim", now=clock.advance(1),
                                   ids=[f"b{i:05d}" for i in range(0, QUEUED, QUEUED // LIMIT)],
                                   **claim)
        finally:
            await transaction.rollback()
    shown = json.dumps(plan, indent=1)
    assert not [n for n in _scans(plan, "jobs") if n["Node Type"] == "Seq Scan"], shown
    read = sum(_read(scan) for scan in _scans(plan, "jobs"))
    assert read <= 3 * LIMIT, (read, shown)


@pytest.mark.parametrize(("query", "mode"), [("", "force_custom_plan"),
                                             ("?plan_cache_mode=auto", "auto")])
async def test_the_url_may_name_another_plan_cache_mode(db_url: str, backend: str,
                                                        query: str, mode: str) -> None:
    if backend != "postgresql":
        pytest.skip("a PostgreSQL setting")
    store = await open_store(db_url + query)
    try:
        async with _pooled(store) as conn:
            assert await conn.fetchval("SHOW plan_cache_mode") == mode
    finally:
        await store.close()

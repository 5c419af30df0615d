"""A tick's cost must not grow with the backlog (docs/internals.md): structural checks on
PostgreSQL.

Not a timing test (``bench/tick_scaling.py`` measures that). With 20,000 queued
rows loaded and ``ANALYZE``d, the statements the reconcile loop sends to select
and claim work are captured as they leave for the driver (the exact SQL and driver
parameters of ``job_fetch_due``, ``job_mark_running_many`` and
``job_expired_sweep``) and ``EXPLAIN``ed with the same parameters: they must read
``jobs`` through an index (the due-jobs fetch through its partial index, in the
index's order, so no Sort and no Seq Scan) and, for the fetch, stop after
``LIMIT`` rows. The generic plans (what a prepared statement switches to after
five runs) are checked too.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from hipq.jobs import Ordering
from hipq.store import Change, ChangeKind, Store, open_store
from hipq.testing import bulk_insert_jobs_sql, migrate_database
from tests.contract._plans import literal

QUEUE = "bench"
OTHER_QUEUE = "other"
BACKLOG = 20_000
LIMIT = 100
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)



def _insert_sql() -> str:
    """The shared bulk loader; 10% of the jobs are not due yet, 5% are critical, 10%
    have a (future) expires_at."""
    return bulk_insert_jobs_sql(
        run_at="$2::timestamptz + make_interval(secs => CASE WHEN i % 10 = 0 THEN 3600 "
               "ELSE -((i * 7919) % 86400) END)",
        expires_at="CASE WHEN i % 10 = 3 THEN $2::timestamptz + interval '1 day' END",
        critical="i % 20 = 7")


@pytest.fixture(scope="module")
async def backlog_db(pg_url: str) -> AsyncIterator[str]:
    """A migrated database with a 20,000-job backlog (and a smaller other queue)."""
    name = f"hipq_plans_{os.getpid()}"
    server = await asyncpg.connect(pg_url)
    try:
        await server.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await server.execute(f"CREATE DATABASE {name}")
    finally:
        await server.close()
    url = f"{pg_url.rpartition('/')[0]}/{name}"
    await migrate_database(url)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(_insert_sql(), QUEUE, NOW, 1, BACKLOG)
        await conn.execute(_insert_sql(), OTHER_QUEUE, NOW, 1, BACKLOG // 4)
        await conn.execute("ANALYZE")
    finally:
        await conn.close()
    yield url
    server = await asyncpg.connect(pg_url)
    try:
        await server.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await server.close()


@pytest.fixture
async def pg_store(backlog_db: str) -> AsyncIterator[Store]:
    store = await open_store(backlog_db)
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
async def raw(backlog_db: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(backlog_db)
    try:
        yield conn
    finally:
        await conn.close()


@contextmanager
def captured(store: Store) -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
    """The (SQL, driver parameters) of every statement the store sends meanwhile
    (asyncpg's query loggers on the connections of the store's pool)."""
    seen: list[tuple[str, tuple[Any, ...]]] = []

    def record(query: Any) -> None:
        seen.append((query.query, tuple(query.args or ())))

    store.add_query_logger(record)  # type: ignore[attr-defined]
    try:
        yield seen
    finally:
        store.remove_query_logger(record)  # type: ignore[attr-defined]


def only(seen: list[tuple[str, tuple[Any, ...]]], prefix: str) -> tuple[str, tuple[Any, ...]]:
    matching = [(sql, params) for sql, params in seen if sql.lstrip().startswith(prefix)]
    assert len(matching) == 1, f"expected one {prefix!r} statement, got {seen}"
    return matching[0]


async def explain(conn: asyncpg.Connection, sql: str, params: tuple[Any, ...], *,
                  analyze: bool = False) -> dict[str, Any]:
    """The JSON plan of ``sql`` as run with ``params`` (a custom plan)."""
    options = "ANALYZE, BUFFERS, FORMAT JSON" if analyze else "FORMAT JSON"
    raw_plan = await conn.fetchval(f"EXPLAIN ({options}) {sql}", *params)
    plan: dict[str, Any] = json.loads(raw_plan)[0]["Plan"]
    return plan


async def explain_generic(conn: asyncpg.Connection, sql: str,
                          params: tuple[Any, ...]) -> dict[str, Any]:
    """The generic plan of ``sql``: what a prepared statement may settle on."""
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    await conn.execute(f"PREPARE hipq_generic AS {sql}")
    try:
        args = ", ".join(literal(p) for p in params)
        raw_plan = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE hipq_generic({args})")
    finally:
        await conn.execute("DEALLOCATE hipq_generic")
        await conn.execute("RESET plan_cache_mode")
    plan: dict[str, Any] = json.loads(raw_plan)[0]["Plan"]
    return plan


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def jobs_scans(plan: dict[str, Any], *, main_only: bool = False) -> list[dict[str, Any]]:
    """The reads of ``jobs`` in a plan; ``main_only``: not those of a per-row SubPlan
    or InitPlan (e.g. an ordering-key check), just the ones that produce the rows."""
    found = []
    if plan.get("Relation Name") == "jobs" and plan["Node Type"] not in ("ModifyTable",
                                                                          "LockRows"):
        found.append(plan)
    for child in plan.get("Plans", []):
        if main_only and child.get("Parent Relationship") in ("SubPlan", "InitPlan"):
            continue
        found.extend(jobs_scans(child, main_only=main_only))
    return found


def assert_indexed(plan: dict[str, Any], index: str) -> None:
    """Every read of ``jobs`` is an index scan (no Seq Scan; no Bitmap scan, which
    would lose the index's order), the rows come from ``index``, and nothing is
    sorted (the order is the index's)."""
    shown = json.dumps(plan, indent=1)
    scans = jobs_scans(plan)
    assert scans, shown
    for scan in scans:
        assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), shown
    main = jobs_scans(plan, main_only=True)
    assert main, shown
    assert {scan["Index Name"] for scan in main} == {index}, shown
    assert not [n for n in nodes(plan) if "Sort" in n["Node Type"]], shown


FETCH_CASES = [
    pytest.param(Ordering.TIME_THEN_PRIORITY, False, "ix_jobs_due_time", id="time"),
    pytest.param(Ordering.PRIORITY_THEN_TIME, False, "ix_jobs_due_priority", id="priority"),
    pytest.param(Ordering.TIME_THEN_PRIORITY, True, "ix_jobs_due_critical", id="critical"),
]


@pytest.mark.parametrize(("ordering", "critical_only", "index"), FETCH_CASES)
async def test_due_fetch_reads_only_a_limit_from_its_partial_index(
        pg_store: Store, raw: asyncpg.Connection, ordering: Ordering, critical_only: bool,
        index: str) -> None:
    with captured(pg_store) as seen:
        due = await pg_store.job_fetch_due(queue=QUEUE, now=NOW, limit=LIMIT, ordering=ordering,
                                           critical_only=critical_only)
    assert len(due) == LIMIT
    assert all(j.run_at <= NOW for j in due)
    sql, params = only(seen, "SELECT")

    plan = await explain(raw, sql, params)
    assert_indexed(plan, index)
    assert plan["Node Type"] == "Limit"
    assert plan["Plan Rows"] <= LIMIT, json.dumps(plan, indent=1)

    analyzed = await explain(raw, sql, params, analyze=True)
    (scan,) = jobs_scans(analyzed, main_only=True)
    assert scan["Actual Rows"] <= LIMIT, json.dumps(analyzed, indent=1)  # stopped at LIMIT
    assert scan.get("Rows Removed by Filter", 0) <= LIMIT, json.dumps(analyzed, indent=1)

    assert_indexed(await explain_generic(raw, sql, params), index)


# The reconcile loop's batch: a small one, and the default fetch limit (a batch
# that large once made the planner hash the whole table to join it by TID).
BATCHES = [pytest.param(LIMIT, id="batch-100"), pytest.param(1000, id="batch-1000")]


@pytest.mark.parametrize("batch", BATCHES)
async def test_claim_reads_jobs_by_primary_key(pg_store: Store, raw: asyncpg.Connection,
                                               batch: int) -> None:
    due = await pg_store.job_fetch_due(queue=QUEUE, now=NOW, limit=batch,
                                       ordering=Ordering.TIME_THEN_PRIORITY)
    with captured(pg_store) as seen:
        claimed = await pg_store.job_mark_running_many(
            queue=QUEUE, ids=[j.id for j in due], now=NOW, owner="plan-test",
            heartbeat_seconds=None)
    assert len(claimed) == batch
    sql, params = only(seen, "WITH chosen")
    await raw.execute("ANALYZE jobs")
    assert_by_key(await explain(raw, sql, params))
    assert_by_key(await explain_generic(raw, sql, params))


def assert_by_key(plan: dict[str, Any]) -> None:
    """Every read of ``jobs`` is a primary-key lookup or a TID fetch of a row found
    that way: nothing scans the backlog or the running set, whatever the estimates."""
    shown = json.dumps(plan, indent=1)
    scans = jobs_scans(plan)
    assert scans, shown
    for scan in scans:
        assert (scan["Node Type"] == "Tid Scan" or scan.get("Index Name") == "jobs_pkey"), shown


def containing(seen: list[tuple[str, tuple[Any, ...]]], marker: str) -> tuple[str, tuple[Any, ...]]:
    matching = [(sql, params) for sql, params in seen if marker in sql]
    assert len(matching) == 1, f"expected one statement with {marker!r}, got {len(matching)}"
    return matching[0]


@pytest.mark.parametrize("batch", BATCHES)
async def test_ending_tries_finds_jobs_by_primary_key(pg_store: Store,
                                                      raw: asyncpg.Connection,
                                                      batch: int) -> None:
    """The drain case: statistics taken while no job ran say no job has an owner (an
    ``owner = $me`` guard looks like one row); archive, re-queue, heartbeat and
    confirm must still reach each job through its key, never scan the table."""
    await raw.execute("ANALYZE jobs")
    due = await pg_store.job_fetch_due(queue=QUEUE, now=NOW, limit=batch,
                                       ordering=Ordering.TIME_THEN_PRIORITY)
    running = await pg_store.job_mark_running_many(
        queue=QUEUE, ids=[j.id for j in due], now=NOW, owner="plan-test",
        heartbeat_seconds=None)
    third = len(running) // 3
    common = {"queue": QUEUE, "launched_at": NOW}
    changes = (
        [Change(kind=ChangeKind.ARCHIVE, id=j.id, attempt=j.attempt, status="succeeded",
                outcome="succeeded", correlation_key=j.correlation_key, **common)
         for j in running[:third]]
        + [Change(kind=ChangeKind.REQUEUE, id=j.id, attempt=j.attempt, run_at=NOW,
                  outcome="timeout", error={"kind": "timeout"},
                  correlation_key=j.correlation_key, **common)
           for j in running[third:2 * third]]
        + [Change(kind=ChangeKind.EXTEND, id=j.id, attempt=j.attempt, deadline=NOW,
                  correlation_key=j.correlation_key, **common)
           for j in running[2 * third:]])
    with captured(pg_store) as seen:
        await pg_store.job_confirm_launch_many(
            keys=[(QUEUE, j.id, j.attempt) for j in running], owner="plan-test")
        applied = await pg_store.persist_batch(changes=changes, owner="plan-test", now=NOW)
    assert len(applied) == len(running)
    for marker in ("launch_confirmed = true", "INSERT INTO archived_jobs",
                   "status = 'queued', run_at", "SET deadline = hit.deadline"):
        sql, params = containing(seen, marker)
        assert_by_key(await explain(raw, sql, params))
        assert_by_key(await explain_generic(raw, sql, params))


async def test_expiry_sweep_reads_only_its_partial_index(pg_store: Store,
                                                         raw: asyncpg.Connection) -> None:
    with captured(pg_store) as seen:
        assert await pg_store.job_expired_sweep(now=NOW, limit=1000) == []
    sql, params = only(seen, "SELECT")
    plan = await explain(raw, sql, params)
    assert_indexed(plan, "ix_jobs_expires")
    assert_indexed(await explain_generic(raw, sql, params), "ix_jobs_expires")

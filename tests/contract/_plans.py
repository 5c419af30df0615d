"""PostgreSQL plans of the driver's named statements. The store's own connections plan
each run for the values and the tables as they are (``force_custom_plan``, see
:mod:`hipq.store.pg_pool`); a database URL naming ``plan_cache_mode=auto`` gets what a
prepared statement settles on after five runs, a generic plan made without seeing the
values. Both are checked: ``generic_plan`` and ``analyzed_plan``'s default mode show
the generic one (``PREPARE`` the block, then ``EXPLAIN EXECUTE`` it)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from hipq.store import Change, ChangeKind, InboxOutcome, Response, Store
from hipq.store.pgsql import SQL
from hipq.testing import FakeClock


def literal(value: Any) -> str:
    """A SQL literal for EXECUTE's arguments (which cannot be bind parameters)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, datetime):
        return f"'{value.isoformat()}'::timestamptz"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, list):  # an empty one as an untyped literal: the parameter's type
        return "ARRAY[" + ", ".join(literal(v) for v in value) + "]" if value else "'{}'"
    raise TypeError(f"no literal for {value!r}")


async def generic_plan(store: Store, name: str, *, seqscan: bool = True,
                       **values: Any) -> dict[str, Any]:
    """The generic plan of the named statement with these values (``seqscan=False``:
    judge the index choice on a small table)."""
    statement = SQL[name]
    args = ", ".join(literal(v) for v in statement.args(**values))
    async with _rolled_back(store) as raw:
        await raw.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        if not seqscan:
            await raw.execute("SET LOCAL enable_seqscan = off")
        await raw.execute(f"PREPARE hipq_generic AS {statement.sql}")
        text = await raw.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE hipq_generic({args})")
        await raw.execute("DEALLOCATE hipq_generic")
    return plan_of(text)


@asynccontextmanager
async def _raw(store: Store) -> AsyncIterator[Any]:
    """A plain asyncpg connection to the store's database (not one of its pool's)."""
    engine = store.engine  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        yield (await conn.get_raw_connection()).driver_connection


@asynccontextmanager
async def _rolled_back(store: Store) -> AsyncIterator[Any]:
    """:func:`_raw`, in a transaction rolled back after the block."""
    async with _raw(store) as raw:
        transaction = raw.transaction()
        await transaction.start()
        try:
            yield raw
        finally:
            await transaction.rollback()


def plan_of(explained: Any) -> dict[str, Any]:
    """The top plan node of ``EXPLAIN (FORMAT JSON)``'s answer (text, or decoded by a
    json codec)."""
    document = json.loads(explained) if isinstance(explained, str | bytes) else explained
    plan: dict[str, Any] = document[0]["Plan"]
    return plan


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def main_scans(plan: dict[str, Any], relation: str) -> list[dict[str, Any]]:
    """The reads of ``relation`` that produce the rows (not those of a SubPlan or
    InitPlan, such as an ordering key's check)."""
    found = []
    if plan.get("Relation Name") == relation and "Scan" in plan["Node Type"]:
        found.append(plan)
    for child in plan.get("Plans", []):
        if child.get("Parent Relationship") not in ("SubPlan", "InitPlan"):
            found.extend(main_scans(child, relation))
    return found


async def analyzed_plan(store: Store, sql: str, args: list[Any], *,
                        mode: str = "force_generic_plan") -> dict[str, Any]:
    """EXPLAIN ANALYZE of ``sql`` under ``plan_cache_mode = mode``, in a transaction
    that is rolled back. The default is the generic plan (no values seen), which a
    connection with PostgreSQL's default ``plan_cache_mode`` soon settles on."""
    async with _rolled_back(store) as raw:
        await raw.execute(f"SET LOCAL plan_cache_mode = {mode}")
        return plan_of(await raw.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args))


async def busy_inbox(store: Store, clock: FakeClock, *, applied: int, pending: int,
                     analyze: bool = False) -> int:
    """Applied rows, then pending ones (received a second later); the id before the
    first pending one."""
    ids = await store.inbox_insert_many(
        [Response(correlation_key=f"old-{i}", result={"n": i}) for i in range(applied)],
        now=clock.now())
    await store.inbox_mark_many([(i, InboxOutcome.APPLIED) for i in ids if i is not None],
                                now=clock.now())
    await store.inbox_insert_many(
        [Response(correlation_key=f"new-{i}", result={"n": i}) for i in range(pending)],
        now=clock.advance(1))
    if analyze:  # committed: the statistics stay
        async with _raw(store) as raw:
            await raw.execute("ANALYZE response_inbox")
    return max(i for i in ids if i is not None)


async def marking_call(store: Store, clock: FakeClock, kind: ChangeKind,
                       jobs: int) -> tuple[str, list[Any]]:
    """Step 3's statement for ``jobs`` running jobs that each end (ARCHIVE) or go
    back or on (REQUEUE, EXTEND) by a response in the inbox, which it marks applied."""
    from hipq.store.pg_persist import persist_calls
    from tests.contract.test_store import OWNER, archive, make_job, start

    running = await start(store, clock, *(make_job(clock, f"j{i:04d}") for i in range(jobs)))
    ids = await store.inbox_insert_many(
        [Response(correlation_key=j.correlation_key or "") for j in running], now=clock.now())
    now = clock.advance(5)
    changes: list[Change] = []
    for job, inbox_id in zip(running, ids, strict=True):
        assert inbox_id is not None
        if kind is ChangeKind.ARCHIVE:
            changes.append(archive(job, inbox_ids=[inbox_id]))
        else:
            changes.append(Change(kind=kind, queue=job.queue, id=job.id, attempt=job.attempt,
                                  status="failed", outcome="failed", run_at=now,
                                  deadline=now + timedelta(seconds=60),
                                  correlation_key=job.correlation_key, inbox_ids=[inbox_id]))
    [call] = persist_calls(changes, OWNER, now)
    return call

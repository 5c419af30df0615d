"""The probe "is this id archived already?" of step 3's archive, the in-tick archive
and the enqueue reads ``archived_jobs_pkey`` while the archive is young.

On a new database the archive has a few hundred rows and no statistics. The
planner then costs ``ix_archived_jobs_queue_finished`` (queue, finished_at, id) the
same as the primary key for a probe by (queue, id), and the first ticks took it:
only the queue is a bound there, so each probe read the queue's whole archive, one
probe a job, quadratic in the first ticks' jobs (a 500-job archive statement read
5,368 index pages and took 80 ms instead of 20). Since schema version 14 that index
is partial (``finished_at IS NOT NULL``, which every row meets): a probe by (queue,
id) does not imply its predicate, so the primary key is the one index it can read.

On a test database (made from a migrated template) the enqueue's probe reads that
index before version 14 and these tests fail there; the archive statements' probe
per row was seen on the benchmark's new databases (auto_explain). The tests hold all
three to the same rule: a read of ``archived_jobs`` run per row goes through the
primary key, and none reads ``ix_archived_jobs_queue_finished``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hipq.store import Change, ChangeKind, Store
from hipq.store.pg_persist import ends_parts, persist_calls
from hipq.store.pgsql import SQL, insert_jobs_call
from hipq.testing import FakeClock
from tests.contract._plans import nodes
from tests.contract.test_store import OWNER, archive, make_job, start

YOUNG = 300  # archived rows before the statement, never analyzed
BATCH = 500  # the jobs of the statement


async def _explain(store: Store, sql: str, args: list[Any], mode: str) -> dict[str, Any]:
    """EXPLAIN ANALYZE under ``plan_cache_mode = mode``, rolled back."""
    engine = store.engine  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        transaction = raw.transaction()
        await transaction.start()
        try:
            await raw.execute(f"SET LOCAL plan_cache_mode = {mode}")
            text = await raw.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args)
        finally:
            await transaction.rollback()
    document = json.loads(text) if isinstance(text, str | bytes) else text
    plan: dict[str, Any] = document[0]["Plan"]
    return plan


def _probes(plan: dict[str, Any]) -> set[str]:
    """The index of every read of ``archived_jobs`` run more than once (a probe per
    row; a scan run once, as a hash join's, is not one)."""
    return {n.get("Index Name", n["Node Type"]) for n in nodes(plan)
            if n.get("Relation Name") == "archived_jobs" and "Scan" in n["Node Type"]
            and n["Actual Loops"] > 1}


def _reads(plan: dict[str, Any]) -> set[str]:
    return {n.get("Index Name", n["Node Type"]) for n in nodes(plan)
            if n.get("Relation Name") == "archived_jobs" and "Scan" in n["Node Type"]}


def _assert_probes_by_key(plan: dict[str, Any]) -> None:
    shown = json.dumps(plan, indent=1)
    assert _probes(plan) <= {"archived_jobs_pkey"}, shown
    assert "ix_archived_jobs_queue_finished" not in _reads(plan), shown


async def _young_archive(store: Store, clock: FakeClock) -> None:
    running = await start(store, clock, *(make_job(clock, f"old{i:04d}")
                                           for i in range(YOUNG)))
    await store.persist_batch(changes=[archive(j) for j in running], owner=OWNER,
                              now=clock.advance(1))


MODES = ["force_custom_plan", "force_generic_plan"]


@pytest.mark.parametrize("mode", MODES)
async def test_the_archive_probes_a_young_archive_by_its_primary_key(
        store: Store, clock: FakeClock, mode: str) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await _young_archive(store, clock)
    jobs = await start(store, clock, *(make_job(clock, f"j{i:04d}") for i in range(BATCH)))
    [(sql, args)] = persist_calls([archive(j) for j in jobs], OWNER, clock.advance(1))
    plan = await _explain(store, sql, args, mode)
    _assert_probes_by_key(plan)


@pytest.mark.parametrize("mode", MODES)
async def test_the_in_tick_archive_probes_a_young_archive_by_its_primary_key(
        store: Store, clock: FakeClock, mode: str) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await _young_archive(store, clock)
    jobs = [make_job(clock, f"j{i:04d}") for i in range(BATCH)]
    assert all(o.status.value == "created" for o in await store.job_insert_many(jobs))
    changes = [Change(kind=ChangeKind.ARCHIVE, queue=j.queue, id=j.id, attempt=j.attempt + 1,
                      status="succeeded", outcome="succeeded") for j in jobs]
    [(_, ends)] = ends_parts(changes)
    statement = SQL["archive_ran"]
    args = statement.args(ends=ends, owner=OWNER, now=clock.advance(1), heartbeat_seconds=None)
    plan = await _explain(store, statement.sql, args, mode)
    _assert_probes_by_key(plan)


@pytest.mark.parametrize("mode", MODES)
async def test_the_enqueue_probes_a_young_archive_by_its_primary_key(
        store: Store, clock: FakeClock, mode: str) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await _young_archive(store, clock)
    jobs = [make_job(clock, f"j{i:04d}") for i in range(BATCH)]
    sql, args = insert_jobs_call(jobs, guarded=False)
    plan = await _explain(store, sql, args, mode)
    _assert_probes_by_key(plan)

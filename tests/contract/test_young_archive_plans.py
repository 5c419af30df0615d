"""The probe "is this id archived already?" of step 3's archive, the in-tick archive
and the enqueue reads ``archived_jobs`` by its primary key, a row at a time, while
the archive is young (a new database, no statistics or statistics from when it was
empty) as later.

Three plans did otherwise on the benchmark's new databases (auto_explain):

- ``ix_archived_jobs_queue_finished`` (queue, finished_at, id) costs the same as the
  primary key on a young archive, and its only bound for a probe by (queue, id) is
  the queue: each probe read the queue's whole archive (a 500-job archive statement
  of a first tick read 5,368 index pages, 80 ms instead of 20). Since schema version
  14 the index is partial (``finished_at IS NOT NULL``, every row's), which a probe
  by (queue, id) does not imply.
- As an anti-join, the enqueue's generic plan (its array taken for 10 rows) ran a
  nested loop over the queue's archive materialized: 1,000 x 2,000 rows, 308 ms for
  one batch; custom plans hashed the whole archive at every statement, as the
  archive statements did on a young archive. The probes are now subplans (``OFFSET
  0``), run per row on the primary key.

Before both changes these tests fail in 8 of their 12 cases.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hipq.store import Change, ChangeKind, Store
from hipq.store.pg_persist import ends_parts, persist_calls
from hipq.store.pgsql import SQL, insert_jobs_call
from hipq.testing import FakeClock
from tests.contract._plans import analyzed_plan, nodes
from tests.contract.test_store import OWNER, archive, make_job, start

pytestmark = pytest.mark.sql_only  # PostgreSQL's plans

YOUNG = 300  # archived rows before the statement, never analyzed
STALE = 2000  # archived rows since the statistics were taken
BATCH = 500  # the jobs of the statement


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
    # the archive is only probed, a row at most a probe: never hashed or scanned whole
    assert _reads(plan) == {"archived_jobs_pkey"}, shown
    for scan in (n for n in nodes(plan) if n.get("Relation Name") == "archived_jobs"):
        assert scan["Actual Rows"] <= 1, shown
    # nothing read again per row: every node's rows, over all its loops, stay within a
    # few times what the statement and the archive hold (a materialized archive
    # rescanned for each row was 1,000 x 2,000)
    flowed = sum(n.get("Actual Rows", 0) * n.get("Actual Loops", 1) for n in nodes(plan))
    assert flowed <= 20 * (BATCH + STALE), shown


async def _archive(store: Store, clock: FakeClock, prefix: str, n: int) -> None:
    running = await start(store, clock, *(make_job(clock, f"{prefix}{i:04d}")
                                           for i in range(n)))
    await store.persist_batch(changes=[archive(j) for j in running], owner=OWNER,
                              now=clock.advance(1))


async def _young_archive(store: Store, clock: FakeClock, state: str) -> None:
    """``young``: YOUNG archived rows, never analyzed. ``stale``: statistics taken
    while the archive was empty (autovacuum's ANALYZE of a new database), then
    STALE rows archived: the planner takes the archive for one row."""
    if state == "young":
        await _archive(store, clock, "old", YOUNG)
        return
    engine = store.engine  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        await raw.execute("ANALYZE archived_jobs")
    await _archive(store, clock, "old", STALE)


MODES = ["force_custom_plan", "force_generic_plan"]
STATES = ["young", "stale"]


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("mode", MODES)
async def test_the_archive_probes_a_young_archive_by_its_primary_key(
        store: Store, clock: FakeClock, mode: str, state: str) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await _young_archive(store, clock, state)
    jobs = await start(store, clock, *(make_job(clock, f"j{i:04d}") for i in range(BATCH)))
    [(sql, args)] = persist_calls([archive(j) for j in jobs], OWNER, clock.advance(1))
    plan = await analyzed_plan(store, sql, args, mode=mode)
    _assert_probes_by_key(plan)


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("mode", MODES)
async def test_the_in_tick_archive_probes_a_young_archive_by_its_primary_key(
        store: Store, clock: FakeClock, mode: str, state: str) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await _young_archive(store, clock, state)
    jobs = [make_job(clock, f"j{i:04d}") for i in range(BATCH)]
    assert all(o.status.value == "created" for o in await store.job_insert_many(jobs))
    changes = [Change(kind=ChangeKind.ARCHIVE, queue=j.queue, id=j.id, attempt=j.attempt + 1,
                      status="succeeded", outcome="succeeded") for j in jobs]
    [(_, ends)] = ends_parts(changes)
    statement = SQL["archive_ran"]
    args = statement.args(ends=ends, owner=OWNER, now=clock.advance(1), heartbeat_seconds=None)
    plan = await analyzed_plan(store, statement.sql, args, mode=mode)
    _assert_probes_by_key(plan)


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("mode", MODES)
async def test_the_enqueue_probes_a_young_archive_by_its_primary_key(
        store: Store, clock: FakeClock, mode: str, state: str) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await _young_archive(store, clock, state)
    jobs = [make_job(clock, f"j{i:04d}") for i in range(BATCH)]
    sql, args = insert_jobs_call(jobs, guarded=False)
    plan = await analyzed_plan(store, sql, args, mode=mode)
    _assert_probes_by_key(plan)

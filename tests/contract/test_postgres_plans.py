"""Plans of the PostgreSQL driver's statements. Step 3 at a tick's size: each marked
row of ``response_inbox`` is read once (a primary-key probe, then the update by row
address), however many responses the tick applies. Step 1
and the operators' listings, as generic plans: each reads its index in its order
and stops at the limit, first page or later one.

A join from a list of inbox ids to a CTE fed by RETURNING (which the planner takes
for one row) ran as a nested loop that rescanned every listed id per marked row:
quadratic in the responses of a tick (one persist of 6,782 took 18 s). The marks now
go through one array of ids.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hipq.store import ChangeKind, InboxOutcome, Response, Store
from hipq.store.pgsql import SQL
from hipq.testing import FakeClock
from tests.contract._plans import analyzed_plan, generic_plan, main_scans, marking_call, nodes
from tests.contract.test_store import OWNER, archive, make_job, start

pytestmark = pytest.mark.sql_only  # PostgreSQL's plans

TICK = 1500  # responses applied in one tick
BACKGROUND = 20_000  # responses of earlier ticks


def _scans_of(plan: dict[str, Any], relation: str) -> list[dict[str, Any]]:
    found = [plan] if plan.get("Relation Name") == relation and "Scan" in plan["Node Type"] else []
    for child in plan.get("Plans", []):
        found += _scans_of(child, relation)
    return found


async def _busy_inbox(store: Store, clock: FakeClock) -> None:
    """An inbox as a busy daemon's: many rows, most applied, and fresh statistics."""
    ids = await store.inbox_insert_many(
        [Response(correlation_key=f"old-{i}") for i in range(BACKGROUND)], now=clock.now())
    await store.inbox_mark_many([(i, InboxOutcome.APPLIED) for i in ids if i is not None],
                                now=clock.now())
    engine = store.engine  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        await raw.execute("ANALYZE response_inbox")


@pytest.mark.parametrize("kind", [ChangeKind.ARCHIVE, ChangeKind.REQUEUE, ChangeKind.EXTEND])
async def test_marking_a_ticks_responses_reads_each_row_once(
        store: Store, clock: FakeClock, kind: ChangeKind) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await _busy_inbox(store, clock)
    sql, args = await marking_call(store, clock, kind, TICK)

    scans = _scans_of(await analyzed_plan(store, sql, args), "response_inbox")
    assert scans, "the statement does not mark the responses"
    _assert_each_marked_row_read_once(scans, TICK)


def _assert_each_marked_row_read_once(scans: list[dict[str, Any]], marked: int) -> None:
    """A scan runs once, or is a primary-key probe a row (at most one row a loop);
    each reads the marked rows once, no more (no rescan of the list per row): the
    probes find them, the fetch by row address updates them."""
    for scan in scans:
        if scan["Actual Loops"] > 1:
            assert scan.get("Index Name") == "response_inbox_pkey", scans
            assert scan["Actual Rows"] <= 1, scans
        assert scan["Actual Rows"] * scan["Actual Loops"] <= marked, scans
    assert sum(s["Actual Rows"] * s["Actual Loops"] for s in scans) == 2 * marked, scans


async def test_marking_stale_responses_reads_each_row_once(store: Store,
                                                            clock: FakeClock) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    from hipq.store.pg_persist import marks_of

    await _busy_inbox(store, clock)
    ids = await store.inbox_insert_many(
        [Response(correlation_key=f"k{i}") for i in range(TICK)], now=clock.now())
    marks = [(i, InboxOutcome.STALE if n % 2 else InboxOutcome.DUPLICATE)
             for n, i in enumerate(ids) if i is not None]
    groups = marks_of(marks, clock.now())
    assert len(groups) == 2
    for values in groups:
        statement = SQL["inbox_mark"]
        scans = _scans_of(await analyzed_plan(store, statement.sql, statement.args(**values)),
                          "response_inbox")
        _assert_each_marked_row_read_once(scans, len(values["ids"]))


# -- step 1 and the listings: generic plans read their index, in its order ----------------

FROM_THE_FIRST = {"after_priority": None, "after_run_at": None, "after_id": None}
DUE = [  # (block, extra values, the indexes it may read)
    ("due_time", {"excluding": [], **FROM_THE_FIRST}, {"ix_jobs_due_time"}),
    ("due_time", {"excluding": ["g1"], **FROM_THE_FIRST}, {"ix_jobs_due_time"}),
    ("due_priority", {"excluding": [], **FROM_THE_FIRST}, {"ix_jobs_due_priority"}),
    ("due_critical", {"excluding": []}, {"ix_jobs_due_critical"}),
    ("due_group_time", {"group": "g1"}, {"ix_jobs_due_group_time"}),
    ("due_group_priority", {"group": "g1"}, {"ix_jobs_due_group_priority"}),
    ("due_group_critical", {"group": "g1"}, {"ix_jobs_due_critical", "ix_jobs_due_group_time"}),
]


async def _backlog(store: Store, clock: FakeClock) -> None:
    """Queued jobs (some critical, grouped or keyed), running ones and archived ones."""
    jobs = [make_job(clock, f"q{i:04d}", critical=i % 7 == 0, group_key=f"g{i % 3}",
                     ordering_key=f"k{i % 11}" if i % 5 == 0 else None,
                     key_order_at=clock.now() if i % 5 == 0 else None)
            for i in range(600)]
    await store.job_insert_many(jobs)
    running = await start(store, clock, *(make_job(clock, f"r{i:04d}") for i in range(300)))
    await store.persist_batch(changes=[archive(j) for j in running[:200]], owner=OWNER,
                              now=clock.advance(1))
    engine = store.engine  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        await raw.execute("ANALYZE")


def _assert_reads(plan: dict[str, Any], relation: str, indexes: set[str], *,
                  ordered: bool = True) -> None:
    scans = main_scans(plan, relation)
    shown = json.dumps(plan, indent=1)
    assert scans, shown
    for scan in scans:
        assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), shown
        assert scan["Index Name"] in indexes, shown
    if ordered:
        assert not [n for n in nodes(plan) if "Sort" in n["Node Type"]], shown


@pytest.mark.parametrize(("name", "values", "indexes"), DUE)
async def test_a_due_fetch_reads_its_partial_index_in_order(
        store: Store, clock: FakeClock, name: str, values: dict[str, Any],
        indexes: set[str]) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await _backlog(store, clock)
    for relaxed in (False, True):
        plan = await generic_plan(store, name, seqscan=False, queue="q", now=clock.now(),
                                  limit=100, relaxed=relaxed, **values)
        assert plan["Node Type"] == "Limit", plan
        _assert_reads(plan, "jobs", indexes)
        if "after_id" in values:  # the first page's bound too is an index condition
            (scan,) = main_scans(plan, "jobs")
            assert "ROW(" in scan.get("Index Cond", ""), json.dumps(plan, indent=1)


PAGES = [  # (block, values, the indexes it may read, whether the index gives the order)
    ("archived_page", {}, {"ix_archived_jobs_finished"}, True),
    ("archived_page_queue", {"queue": "q"}, {"ix_archived_jobs_queue_finished"}, True),
    ("archived_page_status", {"status": "failed"}, {"ix_archived_jobs_unsucceeded"}, True),
    ("archived_page_succeeded", {}, {"ix_archived_jobs_finished"}, True),
    ("live_queued_time_page", {"queue": "q"}, {"ix_jobs_due_time"}, True),
    ("live_queued_priority_page", {"queue": "q"}, {"ix_jobs_due_priority"}, True),
    ("running_page", {"queue": "q"}, {"jobs_pkey"}, True),
]
FIRST_PAGE = {"after_at": None, "after_queue": None, "after_id": None, "after_priority": None}


@pytest.mark.parametrize(("name", "values", "indexes", "ordered"), PAGES)
async def test_a_page_reads_its_index_from_the_previous_page_on(
        store: Store, clock: FakeClock, name: str, values: dict[str, Any], indexes: set[str],
        ordered: bool) -> None:
    """First page or later one, the keyset bound is an index condition of the
    generic plan (a NULL bound is COALESCEd, not tested with IS NULL)."""
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await _backlog(store, clock)
    table = "archived_jobs" if name.startswith("archived") else "jobs"
    later = {"after_at": clock.now(), "after_queue": "q", "after_id": "q0100",
             "after_priority": 0}
    for bound in (FIRST_PAGE, later):
        given = {k: v for k, v in bound.items() if k in SQL[name].params}
        plan = await generic_plan(store, name, seqscan=False, limit=50, **values, **given)
        _assert_reads(plan, table, indexes, ordered=ordered)
        (scan,) = main_scans(plan, table)
        assert "Index Cond" in scan, json.dumps(plan, indent=1)


AFTER = [  # a page read ahead of an in-tick queue (hipq.engine.executor): from the last
    # job that ran on, and the ids up to it
    ("due_priority", "ix_jobs_due_priority"), ("due_time", "ix_jobs_due_time"),
    ("due_head_priority", "ix_jobs_due_priority"), ("due_head_time", "ix_jobs_due_time"),
]


@pytest.mark.parametrize(("name", "index"), AFTER)
async def test_a_page_after_the_last_that_ran_bounds_its_index_range_there(
        store: Store, clock: FakeClock, name: str, index: str) -> None:
    """The key of the last job that ran is an index condition of the generic plan:
    the page after it starts its range there, the ids up to it end theirs there."""
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await _backlog(store, clock)
    values = {"queue": "q", "now": clock.now(), "limit": 50, "relaxed": False, "excluding": [],
              "after_priority": 0, "after_run_at": clock.now(), "after_id": "q0100"}
    plan = await generic_plan(store, name, seqscan=False,
                              **{k: v for k, v in values.items() if k in SQL[name].params})
    _assert_reads(plan, "jobs", {index}, ordered=True)
    (scan,) = main_scans(plan, "jobs")
    assert "ROW(" in scan.get("Index Cond", ""), json.dumps(plan, indent=1)


async def test_pruning_reads_the_applied_responses_through_their_partial_index(
        store: Store, clock: FakeClock) -> None:
    """Since schema version 12 the index of applied responses leaves the pending
    ones out; the pruning's ``applied_at < :before`` still reads it, in order."""
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    ids = await store.inbox_insert_many(
        [Response(correlation_key=f"k-{i}") for i in range(300)], now=clock.now())
    await store.inbox_mark_many([(i, InboxOutcome.APPLIED) for i in ids[:200] if i is not None],
                                now=clock.advance(1))
    plan = await generic_plan(store, "prune", seqscan=False, before=clock.advance(1), limit=100)
    shown = json.dumps(plan, indent=1)
    reads = [n for n in nodes(plan) if n.get("Relation Name") == "response_inbox"
             and "applied_at" in n.get("Index Cond", "") + n.get("Filter", "")]
    assert [(n["Node Type"], n.get("Index Name")) for n in reads] == [
        ("Index Scan", "ix_response_inbox_applied")], shown
    assert not [n for n in nodes(plan) if "Sort" in n["Node Type"]], shown


@pytest.mark.parametrize("name", ["attempt_keys", "late_tries"])
async def test_past_tries_are_found_by_key_through_an_index(store: Store, clock: FakeClock,
                                                            name: str) -> None:
    """A response no live job claims is looked up among past tries by its key, once
    per such response (late, stale, or a callback at a daemon that does not hold the
    try): through ``ix_job_attempts_key`` (schema 9) and, for the tries an archived
    row holds, ``ix_archived_jobs_folded_key`` (schema 13), never by reading the
    history or the archive."""
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    jobs = await start(store, clock, *(make_job(clock, f"h{i}") for i in range(50)))
    await store.persist_batch(  # half of them held by their archived row
        changes=[archive(j, response={"source": "target"} if i % 2 else None)
                 for i, j in enumerate(jobs)], owner=OWNER, now=clock.now())
    plan = await generic_plan(store, name, seqscan=False, keys=["~tok-h1.1"])
    shown = json.dumps(plan, indent=1)
    assert not [n for n in nodes(plan) if n["Node Type"] == "Seq Scan"], shown
    used = {n.get("Index Name") for n in nodes(plan)}
    assert {"ix_job_attempts_key", "ix_archived_jobs_folded_key"} <= used, shown
    keys = [jobs[1].correlation_key or "", jobs[2].correlation_key or ""]
    found = await store.archived_by_attempt_keys(keys)
    assert found == {keys[0]: ("q", "h1"), keys[1]: ("q", "h2")}


@pytest.mark.parametrize("name", ["archive_ran", "claim"])
async def test_a_claim_finds_each_job_by_its_key(store: Store, clock: FakeClock,
                                                 name: str) -> None:
    """Step 4's claim and the end of a try that ran within its tick look each job up
    by (queue, id): never through a due index probed by the queue alone (a match of
    ``status = 'queued'`` makes the planner pick one on a fresh table: a scan of the
    whole backlog per job; the first in-tick runs spent 50 us a job there)."""
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await store.job_insert_many([make_job(clock, f"b{i:04d}") for i in range(600)])
    if name == "claim":
        values: dict[str, Any] = {"queue": "q", "ids": ["b0001", "b0002"], "now": clock.now(),
                                  "owner": OWNER, "heartbeat_seconds": None}
    else:
        ends = [["q", f"b{i:04d}", 1, "succeeded", None, None, "succeeded", None]
                for i in (1, 2)]
        values = {"ends": json.dumps(ends), "owner": OWNER, "now": clock.now(),
                  "heartbeat_seconds": None}
    plan = await generic_plan(store, name, **values)
    shown = json.dumps(plan, indent=1)
    probes = [n for n in nodes(plan) if n.get("Relation Name") == "jobs"
              and n["Node Type"] in ("Index Scan", "Index Only Scan")]
    assert probes, shown
    assert {n.get("Index Name") for n in probes} == {"jobs_pkey"}, shown

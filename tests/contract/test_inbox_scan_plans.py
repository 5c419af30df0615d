"""The plan of step 0's read of new inbox rows (``inbox_pending_scan``) in a busy
inbox: it reads the page's rows, not the applied ones kept before them.

The page's ids and sizes are read first (a materialized CTE), then the rows within
the character bound are read whole. Joined to that CTE, whose rows the planner cannot
count, the rows were read by a merge join that walked the primary key from the
inbox's first row: every applied row kept, at every read (20,000 rows for a page of
2,000 here; in a Kafka round trip of 20,000 jobs, some runs spent 0.13-0.35 ms of
PostgreSQL a job in this statement, against 0.07 for all the rest). The rows are now
read by one primary-key probe each (a lateral subquery kept a probe by LIMIT 1).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hipq.store import ChangeKind, InboxOutcome, Response, Store
from hipq.store.pgsql import SQL
from hipq.testing import FakeClock
from tests.contract._plans import analyzed_plan, busy_inbox, marking_call, nodes

pytestmark = pytest.mark.sql_only  # PostgreSQL's plans

APPLIED = 20_000  # responses of earlier ticks, applied
PENDING = 2_000  # new ones, a page's worth


@pytest.mark.parametrize("analyze", [False, True])
@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_a_page_of_new_rows_does_not_read_the_applied_ones(
        store: Store, clock: FakeClock, mode: str, analyze: bool) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    last_applied = await busy_inbox(store, clock, applied=APPLIED, pending=PENDING,
                                    analyze=analyze)
    statement = SQL["inbox_pending_scan"]
    for after_id in (0, last_applied):
        args = statement.args(after_id=after_id, before=clock.advance(1), limit=PENDING,
                              max_chars=16 * 1024 * 1024)
        plan = await analyzed_plan(store, statement.sql, args, mode=mode)
        shown = json.dumps(plan, indent=1)
        scans = [n for n in nodes(plan) if n.get("Relation Name") == "response_inbox"]
        assert scans, shown
        # the page's ids (PENDING rows), then its rows: nothing of the applied ones
        assert sum(s["Actual Rows"] * s["Actual Loops"] for s in scans) <= 2 * PENDING, shown
        # the rows read whole: a probe each, none tested and thrown away (as "id =
        # ANY(ARRAY(page ids))" did, by a sequential scan testing every row)
        whole = [s for s in scans if s.get("Alias") == "x"]
        assert whole, shown
        for scan in whole:
            assert scan["Actual Rows"] * scan["Actual Loops"] == PENDING, shown
            assert scan.get("Rows Removed by Filter", 0) == 0, shown
        assert plan["Actual Rows"] == PENDING, shown


# -- marking responses applied: their rows only, however many others are pending ----------

OTHERS = 3_000  # responses pending beside the ones marked (a backlog, a young inbox)
MARKED = 1_500


def _assert_reads_only_marked(plan: dict[str, Any]) -> None:
    """Every read of ``response_inbox`` passes over the marked rows only: nothing of
    the other pending rows read and thrown away."""
    shown = json.dumps(plan, indent=1)
    scans = [n for n in nodes(plan) if n.get("Relation Name") == "response_inbox"
             and n["Node Type"] != "ModifyTable"]
    assert scans, shown
    for scan in scans:
        loops = scan["Actual Loops"]
        assert scan["Actual Rows"] * loops <= MARKED, shown
        assert scan.get("Rows Removed by Filter", 0) * loops == 0, shown
        assert scan.get("Rows Removed by Index Recheck", 0) * loops == 0, shown


@pytest.mark.parametrize("kind", [ChangeKind.ARCHIVE, ChangeKind.REQUEUE, ChangeKind.EXTEND])
@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_marking_responses_reads_their_rows_only(
        store: Store, clock: FakeClock, mode: str, kind: ChangeKind) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    await store.inbox_insert_many([Response(correlation_key=f"other-{i}")
                                   for i in range(OTHERS)], now=clock.now())
    sql, args = await marking_call(store, clock, kind, MARKED)
    plan = await analyzed_plan(store, sql, args, mode=mode)
    _assert_reads_only_marked(plan)


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_marking_stale_responses_reads_their_rows_only(
        store: Store, clock: FakeClock, mode: str) -> None:
    if store.dialect != "postgresql":
        pytest.skip("a PostgreSQL plan")
    from hipq.store.pg_persist import marks_of

    await store.inbox_insert_many([Response(correlation_key=f"other-{i}")
                                   for i in range(OTHERS)], now=clock.now())
    ids = await store.inbox_insert_many(
        [Response(correlation_key=f"k{i}") for i in range(MARKED)], now=clock.now())
    [values] = marks_of([(i, InboxOutcome.STALE) for i in ids if i is not None], clock.now())
    statement = SQL["inbox_mark"]
    plan = await analyzed_plan(store, statement.sql, statement.args(**values), mode=mode)
    _assert_reads_only_marked(plan)

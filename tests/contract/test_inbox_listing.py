"""``Store.inbox_list_unmatched`` on every driver (the ``store`` fixture: SQLite and
PostgreSQL): only rows recorded as unmatched, newest first, keyset pages without
gaps or repeats, results and errors cut to a bound, and a plan that reads the
partial index of unmatched rows (not the whole inbox)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from hipq.store import InboxOutcome, ListedResponse, Response, Store
from hipq.store.sqlite_reads import unmatched_query
from hipq.testing import FakeClock
from tests.contract._plans import generic_plan, main_scans, nodes


async def _responses(store: Store, clock: FakeClock, *keys: str,
                     outcome: InboxOutcome | None = InboxOutcome.UNMATCHED,
                     **fields: Any) -> list[int]:
    """Write one response per key (received now), marked with ``outcome``."""
    ids = await store.inbox_insert_many([Response(correlation_key=k, **fields) for k in keys],
                                        now=clock.now())
    assert None not in ids
    row_ids = [i for i in ids if i is not None]
    if outcome is not None:
        await store.inbox_mark_many([(i, outcome) for i in row_ids], now=clock.now())
    return row_ids


async def _all_pages(store: Store, size: int) -> list[ListedResponse]:
    seen: list[ListedResponse] = []
    after: tuple[datetime, int] | None = None
    for _ in range(100):
        page = await store.inbox_list_unmatched(limit=size, after=after)
        assert len(page) <= size
        seen += page
        if len(page) < size:
            return seen
        after = (page[-1].received_at, page[-1].id)
    raise AssertionError("pagination never ended")


async def test_nothing_unmatched_is_an_empty_list(store: Store, clock: FakeClock) -> None:
    assert await store.inbox_list_unmatched() == []
    await _responses(store, clock, "pending", outcome=None)
    await _responses(store, clock, "applied", outcome=InboxOutcome.APPLIED)
    assert await store.inbox_list_unmatched() == []


async def test_only_unmatched_rows_newest_first(store: Store, clock: FakeClock) -> None:
    old = await _responses(store, clock, "u-old")
    clock.advance(10)
    await _responses(store, clock, "pending", outcome=None)
    for outcome in (InboxOutcome.APPLIED, InboxOutcome.DUPLICATE, InboxOutcome.STALE,
                    InboxOutcome.LATE):
        await _responses(store, clock, f"k-{outcome}", outcome=outcome)
    clock.advance(10)
    new = await _responses(store, clock, "u-new-1", "u-new-2")  # same received_at: by id

    listed = await store.inbox_list_unmatched()
    assert [r.correlation_key for r in listed] == ["u-new-2", "u-new-1", "u-old"]
    assert [r.id for r in listed] == [new[1], new[0], old[0]]


async def test_a_listed_response_carries_its_fields(store: Store, clock: FakeClock) -> None:
    received = clock.now()
    ids = await _responses(store, clock, "ghost", outcome=None, attempt=3, status="failed",
                           retryable=False, result={"order": 7}, error={"kind": "nope"},
                           source="kafka")
    recorded = clock.advance(61)
    await store.inbox_mark_many([(ids[0], InboxOutcome.UNMATCHED)], now=recorded)

    [row] = await store.inbox_list_unmatched()
    assert row == ListedResponse(id=ids[0], correlation_key="ghost", attempt=3, status="failed",
                                 source="kafka", received_at=received, recorded_at=recorded,
                                 result={"order": 7}, error={"kind": "nope"}, truncated=())


async def test_pages_have_no_gaps_and_no_repeats(store: Store, clock: FakeClock) -> None:
    keys: list[str] = []
    for second in range(4):  # ties on received_at within each second
        batch = [f"k{second}-{i}" for i in range(3)]
        await _responses(store, clock, *batch)
        await _responses(store, clock, f"applied-{second}", outcome=InboxOutcome.APPLIED)
        keys += batch
        clock.advance(1)
    expected = list(reversed(keys))
    for size in (1, 2, 5, 12, 100):
        assert [r.correlation_key for r in await _all_pages(store, size)] == expected, size


async def test_after_is_exclusive_and_rows_marked_later_keep_their_place(
        store: Store, clock: FakeClock) -> None:
    first = await _responses(store, clock, "a", "b")
    page = await store.inbox_list_unmatched(limit=1)
    assert [r.id for r in page] == [first[1]]
    clock.advance(5)
    late = await _responses(store, clock, "c", outcome=None)  # marked after the first page
    await store.inbox_mark_many([(late[0], InboxOutcome.UNMATCHED)], now=clock.now())
    rest = await store.inbox_list_unmatched(after=(page[0].received_at, page[0].id))
    assert [r.id for r in rest] == [first[0]]  # newer rows belong before the cursor
    assert [r.id for r in await store.inbox_list_unmatched()] == [late[0], *reversed(first)]


async def test_results_and_errors_are_cut_to_the_bound(store: Store, clock: FakeClock) -> None:
    big = {"blob": "x" * 3000}
    huge = {"blob": "z" * 5000}
    await _responses(store, clock, "big-result", result=big, error="short")
    await _responses(store, clock, "big-error", result=[1, 2], error={"trace": "y" * 300})
    await _responses(store, clock, "small", result="r" * 98)  # 100 characters of JSON
    await _responses(store, clock, "huge", error=huge)

    rows = {r.correlation_key: r for r in await store.inbox_list_unmatched(value_chars=100)}
    cut = rows["big-result"]
    assert cut.truncated == ("result",)
    assert isinstance(cut.result, str)
    assert len(cut.result) == 100
    assert cut.result.startswith('{"blob":')
    assert cut.error == "short"
    assert rows["big-error"].truncated == ("error",)
    assert rows["big-error"].result == [1, 2]
    assert isinstance(rows["big-error"].error, str)
    assert len(rows["big-error"].error) == 100
    assert rows["small"].truncated == ()
    assert rows["small"].result == "r" * 98
    assert len(json.dumps("r" * 98)) == 100

    whole = {r.correlation_key: r for r in await store.inbox_list_unmatched()}
    assert whole["big-result"].result == big  # within the default bound (4,096)
    assert whole["big-result"].truncated == ()
    assert whole["huge"].truncated == ("error",)
    assert len(whole["huge"].error) == 4096
    assert whole["big-error"].error == {"trace": "y" * 300}
    assert whole["big-error"].truncated == ()


@pytest.mark.sql_only
async def test_the_listing_reads_the_index_of_unmatched_rows(store: Store,
                                                            clock: FakeClock) -> None:
    """A range scan of ``ix_response_inbox_unmatched`` in the listing's order (no sort,
    no walk over the inbox), also as a generic plan on PostgreSQL, first page and
    later ones: its predicate is a literal, not a parameter, and the page's bound
    stays an index condition."""
    await _responses(store, clock, *(f"a{i}" for i in range(50)), outcome=InboxOutcome.APPLIED)
    await _responses(store, clock, "u1", "u2")
    after = (clock.now() + timedelta(seconds=1), 2**40)
    if store.dialect == "postgresql":
        for at, after_id in (after, (None, None)):
            plan = await generic_plan(store, "unmatched_page", seqscan=False, limit=10,
                                      value_chars=100, after_at=at, after_id=after_id)
            (scan,) = main_scans(plan, "response_inbox")
            assert scan["Node Type"] == "Index Scan", plan
            assert scan["Index Name"] == "ix_response_inbox_unmatched", plan
            assert scan["Scan Direction"] == "Backward", plan
            assert "Index Cond" in scan, plan
            assert not [n for n in nodes(plan) if "Sort" in n["Node Type"]], plan
        return
    stmt = unmatched_query(limit=10, after=after, value_chars=100)
    engine = store.engine  # type: ignore[attr-defined]
    compiled = stmt.compile(dialect=engine.dialect)
    values = compiled.construct_params()
    params = [values[name] for name in compiled.positiontup or []]
    params = [v.timestamp() if isinstance(v, datetime) else v for v in params]
    async with engine.connect() as conn:
        rows = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", tuple(params))
        plan = " | ".join(str(r[-1]) for r in rows)
    assert "USING INDEX ix_response_inbox_unmatched" in plan, plan
    assert "TEMP B-TREE" not in plan, plan

"""``job_fetch_due_after``: the page after a page of an in-tick queue ran
(the executor's read-ahead, hipq.engine.executor). On PostgreSQL (and the store in
memory) it reads from the job after the last one that ran, and gives None (read from
the start) when a queued job that did not run comes up to that one; SQLite always
gives None (it reads no page ahead)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hipq.jobs import Job, Ordering
from hipq.store import Store
from hipq.testing import FakeClock
from tests.contract.test_store import Q, insert, make_job


async def _page(store: Store, clock: FakeClock, ran: list[Job], *, limit: int = 100,
                ordering: Ordering = Ordering.PRIORITY_THEN_TIME) -> list[str] | None:
    page = await store.job_fetch_due_after(queue=Q, now=clock.now(), limit=limit,
                                           ordering=ordering, after=ran[-1],
                                           ran={j.id for j in ran})
    return None if page is None else [j.id for j in page]


async def _queued(store: Store, clock: FakeClock, count: int, **fields: object) -> list[Job]:
    jobs = [make_job(clock, f"j{i:03d}", **fields) for i in range(count)]  # type: ignore[arg-type]
    await insert(store, *jobs)
    return await store.job_fetch_due(queue=Q, now=clock.now(), limit=count,
                                     ordering=Ordering.PRIORITY_THEN_TIME)


@pytest.fixture
def reads_ahead(store: Store) -> None:
    if store.dialect == "sqlite":
        pytest.skip("SQLite reads no page ahead")


async def test_sqlite_reads_from_the_start(store: Store, clock: FakeClock) -> None:
    if store.dialect != "sqlite":
        pytest.skip("SQLite's answer")
    jobs = await _queued(store, clock, 5)
    assert await _page(store, clock, jobs[:2]) is None


@pytest.mark.usefixtures("reads_ahead")
async def test_the_page_starts_after_the_last_job_that_ran(store: Store,
                                                           clock: FakeClock) -> None:
    jobs = await _queued(store, clock, 10)  # one batch: the same run_at, ordered by id
    assert await _page(store, clock, jobs[:4], limit=3) == ["j004", "j005", "j006"]
    assert await _page(store, clock, jobs[:9]) == ["j009"]
    assert await _page(store, clock, jobs) == []


@pytest.mark.usefixtures("reads_ahead")
async def test_a_job_that_did_not_run_before_the_last_one_asks_for_a_fresh_read(
        store: Store, clock: FakeClock) -> None:
    """Held back by the throttler, or enqueued ahead while the page ran: the page after
    would pass it by, so there is none."""
    jobs = await _queued(store, clock, 10)
    assert await _page(store, clock, [jobs[0], *jobs[2:5]]) is None  # j001 held back
    clock.advance(1)
    await insert(store, make_job(clock, "urgent", priority=-5, run_at=clock.now()))
    assert await _page(store, clock, jobs[:5]) is None


@pytest.mark.usefixtures("reads_ahead")
async def test_jobs_that_ran_and_left_the_queue_are_not_missed(store: Store,
                                                               clock: FakeClock) -> None:
    """Part of the page already archived (no longer queued) is no reason to read
    again; and a job enqueued behind the last one is in the page."""
    jobs = await _queued(store, clock, 6)
    await store.job_mark_running_many(queue=Q, ids=["j000", "j001"], now=clock.now(),
                                      owner="o", heartbeat_seconds=None)
    clock.advance(1)
    await insert(store, make_job(clock, "later", run_at=clock.now()))
    assert await _page(store, clock, jobs[:3]) == ["j003", "j004", "j005", "later"]


@pytest.mark.usefixtures("reads_ahead")
async def test_time_order_and_priorities(store: Store, clock: FakeClock) -> None:
    first = clock.now()
    await insert(store, *(make_job(clock, f"p{i}", priority=i % 3,
                                   run_at=first + timedelta(seconds=i)) for i in range(9)))
    now = clock.advance(60)
    by_priority = await store.job_fetch_due(queue=Q, now=now, limit=9,
                                            ordering=Ordering.PRIORITY_THEN_TIME)
    assert await _page(store, clock, by_priority[:4]) == [j.id for j in by_priority[4:]]
    by_time = await store.job_fetch_due(queue=Q, now=now, limit=9,
                                        ordering=Ordering.TIME_THEN_PRIORITY)
    assert await _page(store, clock, by_time[:5], ordering=Ordering.TIME_THEN_PRIORITY) == [
        j.id for j in by_time[5:]]
    # the last that ran in priority order is p6 (priority 0): p1 (priority 1) is after
    # it there, but before it in time order, where it did not run
    assert await _page(store, clock, by_priority[:3],
                       ordering=Ordering.TIME_THEN_PRIORITY) is None

"""Reads of a queue's live jobs on every store (SQLite, PostgreSQL, memory), beyond
``test_store.py``'s: step 1's fetch by quota group and by ordering key (strict, and
relaxed for a job waiting for its retry), the bounded count of due jobs, where a
queued job stands (why it waits), and the operators' keyset pages of live jobs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from hipq.jobs import Job, Ordering
from hipq.store import Change, ChangeKind, Store
from hipq.testing import FakeClock
from tests.contract.test_store import OWNER, Q, archive, get, insert, make_job, start

TIME, PRIORITY = Ordering.TIME_THEN_PRIORITY, Ordering.PRIORITY_THEN_TIME


async def _due(store: Store, clock: FakeClock, **shape: Any) -> list[str]:
    jobs = await store.job_fetch_due(queue=Q, now=clock.now(), limit=100, ordering=PRIORITY,
                                     **shape)
    return [j.id for j in jobs]


def _keyed(clock: FakeClock, job_id: str, seconds: float, **fields: Any) -> Job:
    """A job of ordering key "k", ``seconds`` after the clock in the key's order."""
    return make_job(clock, job_id, ordering_key="k",
                    key_order_at=clock.now() + timedelta(seconds=seconds), **fields)


# -- step 1 ---------------------------------------------------------------------------


async def test_a_quota_group_is_fetched_apart_from_the_default_one(store: Store,
                                                                   clock: FakeClock) -> None:
    await insert(store, make_job(clock, "a", group_key="g1"), make_job(clock, "b", group_key="g2"),
                 make_job(clock, "c", group_key="g1"), make_job(clock, "d"),
                 make_job(clock, "e", group_key="g3"))
    assert await _due(store, clock, group="g1") == ["a", "c"]
    assert await _due(store, clock, group="nobody") == []
    assert await _due(store, clock, default_group_excluding=["g1", "g2"]) == ["d", "e"]
    assert await _due(store, clock, default_group_excluding=[]) == ["a", "b", "c", "d", "e"]
    assert await _due(store, clock) == ["a", "b", "c", "d", "e"]


async def test_a_keyed_job_is_due_only_at_the_head_of_its_key(store: Store,
                                                              clock: FakeClock) -> None:
    await insert(store, _keyed(clock, "second", 1), _keyed(clock, "first", 0),
                 make_job(clock, "plain"))
    assert await _due(store, clock) == ["first", "plain"]
    [first] = await store.job_mark_running_many(queue=Q, ids=["first"], now=clock.now(),
                                                owner=OWNER, heartbeat_seconds=None)
    assert await _due(store, clock) == ["plain"]  # the key's head runs
    await store.persist_batch(changes=[archive(first)], owner=OWNER, now=clock.now())
    assert await _due(store, clock) == ["plain", "second"]


@pytest.mark.parametrize(("key_mode", "due"), [("strict", []),
                                               ("relaxed_on_retry", ["second"])])
async def test_a_job_waiting_for_its_retry_holds_its_key_unless_relaxed(
        store: Store, clock: FakeClock, key_mode: str, due: list[str]) -> None:
    [first] = await start(store, clock, _keyed(clock, "first", 0))
    await insert(store, _keyed(clock, "second", 1))
    await store.persist_batch(changes=[Change(
        kind=ChangeKind.REQUEUE, queue=Q, id="first", attempt=1, outcome="timeout",
        run_at=clock.now() + timedelta(minutes=1), launched_at=first.launched_at,
        correlation_key=first.correlation_key)], owner=OWNER, now=clock.now())
    assert await _due(store, clock, key_mode=key_mode) == due
    clock.advance(61)  # its retry is due: it heads the key again, in either mode
    assert await _due(store, clock, key_mode=key_mode) == ["first"]


async def test_the_count_of_due_jobs_is_bounded(store: Store, clock: FakeClock) -> None:
    await insert(store, *(make_job(clock, f"d{i}") for i in range(5)),
                 make_job(clock, "later", run_at=clock.now() + timedelta(seconds=1)),
                 make_job(clock, "elsewhere", queue="other"))
    await start(store, clock, make_job(clock, "running"))
    assert await store.job_count_due(queue=Q, now=clock.now(), limit=10) == 5
    assert await store.job_count_due(queue=Q, now=clock.now(), limit=3) == 3
    assert await store.job_count_due(queue=Q, now=clock.advance(1), limit=10) == 6
    assert await store.job_count_due(queue="nobody", now=clock.now(), limit=10) == 0


# -- why a job waits ---------------------------------------------------------------------


async def test_where_a_queued_job_stands(store: Store, clock: FakeClock) -> None:
    t0 = clock.now()
    await start(store, clock, make_job(clock, "r1", weight=2, group_key="g1"),
                make_job(clock, "r2", weight=3, critical=True),
                make_job(clock, "r3", weight=1, group_key="g1"))
    await insert(store, make_job(clock, "urgent", priority=1, run_at=t0 - timedelta(seconds=5)),
                 make_job(clock, "older", priority=5, run_at=t0 - timedelta(seconds=5)),
                 make_job(clock, "me", priority=5),
                 make_job(clock, "same-z", priority=5),
                 make_job(clock, "later", priority=1, run_at=t0 + timedelta(hours=1)))
    me = await get(store, "me")

    by_priority = await store.job_standing(job=me, now=t0, ordering=PRIORITY, limit=10)
    assert by_priority.running == {(False, "g1"): 3, (True, None): 3}
    assert (by_priority.key_ahead, by_priority.ahead) == (None, 2)  # urgent, older
    by_time = await store.job_standing(job=me, now=t0, ordering=TIME, limit=10)
    assert by_time.ahead == 2  # older and urgent came first; same-z is after me by id
    bounded = await store.job_standing(job=me, now=t0, ordering=PRIORITY, limit=1)
    assert bounded.ahead == 1


async def test_the_first_job_of_its_key_that_holds_it_back(store: Store,
                                                           clock: FakeClock) -> None:
    await insert(store, _keyed(clock, "b-first", 0), _keyed(clock, "a-second", 1),
                 _keyed(clock, "me", 2))
    me = await get(store, "me")

    async def key_ahead(key_mode: str = "strict") -> str | None:
        standing = await store.job_standing(job=me, now=clock.now(), ordering=PRIORITY,
                                            limit=10, key_mode=key_mode)
        return standing.key_ahead

    assert await key_ahead() == "b-first"  # by the key's order, not by id
    [running] = await store.job_mark_running_many(queue=Q, ids=["a-second"], now=clock.now(),
                                                  owner=OWNER, heartbeat_seconds=None)
    assert await key_ahead() == "b-first"
    await store.job_archive_queued_many(queue=Q, ends={"b-first": ("cancelled", None)},
                                        now=clock.now())
    assert await key_ahead() == "a-second"  # running
    await store.persist_batch(changes=[Change(
        kind=ChangeKind.REQUEUE, queue=Q, id="a-second", attempt=1, outcome="timeout",
        run_at=clock.now() + timedelta(minutes=1), launched_at=running.launched_at,
        correlation_key=running.correlation_key)], owner=OWNER, now=clock.now())
    assert await key_ahead() == "a-second"  # waiting for its retry
    assert await key_ahead("relaxed_on_retry") is None
    plain = await store.job_standing(job=await get(store, "a-second"), now=clock.now(),
                                     ordering=PRIORITY, limit=10)
    assert plain.key_ahead is None  # nothing of its key before it


# -- operators' pages of live jobs ----------------------------------------------------------


async def _pages(store: Store, state: str, ordering: Ordering,
                 key: Any) -> list[str]:
    seen: list[str] = []
    after = None
    while True:
        page = await store.job_list_live(queue=Q, state=state, ordering=ordering, limit=2,
                                         after=after)
        seen += [j.id for j in page]
        if len(page) < 2:
            return seen
        after = key(page[-1])


@pytest.mark.parametrize(("ordering", "key", "expected"), [
    (TIME, lambda j: (j.run_at, j.priority, j.id), ["c", "b", "a", "d", "e"]),
    (PRIORITY, lambda j: (j.priority, j.run_at, j.id), ["c", "d", "b", "a", "e"]),
])
async def test_queued_jobs_are_listed_in_pages_in_queue_order(
        store: Store, clock: FakeClock, ordering: Ordering, key: Any,
        expected: list[str]) -> None:
    t0 = clock.now()
    await insert(store, make_job(clock, "a", priority=5, run_at=t0),
                 make_job(clock, "b", priority=5, run_at=t0 - timedelta(seconds=9)),
                 make_job(clock, "c", priority=1, run_at=t0 - timedelta(seconds=9)),
                 make_job(clock, "d", priority=1, run_at=t0 + timedelta(hours=1)),
                 make_job(clock, "e", priority=7, run_at=t0 + timedelta(hours=1)),
                 make_job(clock, "other", queue="other"))
    await start(store, clock, make_job(clock, "running"))
    assert await _pages(store, "queued", ordering, key) == expected


async def test_running_jobs_are_listed_in_pages_by_launch(store: Store,
                                                          clock: FakeClock) -> None:
    await start(store, clock, make_job(clock, "z"), make_job(clock, "y"))
    clock.advance(1)
    await start(store, clock, make_job(clock, "a"))
    await insert(store, make_job(clock, "queued"))
    assert await _pages(store, "running", TIME, lambda j: (j.launched_at, j.id)) == [
        "y", "z", "a"]

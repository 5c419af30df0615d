"""What the owners of queues keep in the store besides jobs, on every store (SQLite,
PostgreSQL, memory): a partner's pauses per scope (replaced whole by the owner,
cleared by a resume), what the owner learned of its queue, and the launch events
of rate limits moved by an adoption or a handover (hipq.engine.rates)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hipq.jobs import Ordering
from hipq.store import Store
from hipq.store.records import Backoff, QueueState
from hipq.testing import FakeClock
from tests.contract.test_store import OWNER, Q, insert, make_job


def _pause(clock: FakeClock, group: str | None, *, queue: str = Q, streak: int = 1) -> Backoff:
    now = clock.now()
    return Backoff(queue=queue, group=group, until=now + timedelta(seconds=30),
                   reason="HTTP 429", streak=streak, since=now)


async def test_a_queues_pauses_are_replaced_whole_and_cleared(store: Store,
                                                              clock: FakeClock) -> None:
    await store.backoff_replace(queue=Q, backoffs=[_pause(clock, "x"), _pause(clock, None)])
    await store.backoff_replace(queue="other", backoffs=[_pause(clock, "y", queue="other")])
    assert await store.backoff_list(queues=[Q]) == [_pause(clock, None), _pause(clock, "x")]
    assert [(b.queue, b.group) for b in await store.backoff_list()] == [
        ("other", "y"), (Q, None), (Q, "x")]

    later = clock.advance(5)
    again = [_pause(clock, "x", streak=2), _pause(clock, "z")]
    await store.backoff_replace(queue=Q, backoffs=again)
    assert await store.backoff_list(queues=[Q]) == again  # the queue's pause is gone
    assert [b.since for b in await store.backoff_list(queues=[Q])] == [later, later]
    assert await store.backoff_list(queues=["nobody"]) == []

    assert await store.backoff_clear(queue=Q) == 2
    assert await store.backoff_clear(queue=Q) == 0
    assert await store.backoff_list(queues=[Q]) == []
    assert [b.group for b in await store.backoff_list()] == ["y"]
    await store.backoff_replace(queue="other", backoffs=[])
    assert await store.backoff_list() == []


def _given_back(partner: bool = True, **extra: Any) -> dict[str, Any]:
    """A queued job's error as a throttled try given back leaves it (hipq.engine.decide)."""
    return {"kind": "throttled", "detail": "HTTP 429", "in_a_row": 1,
            "data": {"status": 429, "retry_after": 120.0, "from_partner": partner}, **extra}


async def test_a_resume_makes_the_jobs_the_partner_held_back_due_now(
        store: Store, clock: FakeClock) -> None:
    """``backoff_clear`` with ``now``: the pauses end and the queue's queued jobs given
    back by the partner's "not now" are due at ``now``; every other job keeps its
    ``run_at`` (a producer's run_after, a retry's back-off, a producer's throttled
    status, a try past ``max_throttled`` retried by the strategy, another queue)."""
    now = clock.now()
    later = now + timedelta(seconds=120)
    failed_throttled = {"kind": "throttled", "detail": "HTTP 429",
                        "data": {"from_partner": True, "retry_after": later.isoformat()}}
    await insert(store,
                 make_job(clock, "held", run_at=later, error=_given_back()),
                 make_job(clock, "held-long", run_at=now + timedelta(days=1),
                          error=_given_back(in_a_row=7)),
                 make_job(clock, "run-after", run_at=later),
                 make_job(clock, "retrying", run_at=later, attempt=1,
                          error={"kind": "http_status", "detail": "HTTP 500"}),
                 make_job(clock, "producer", run_at=later, error=_given_back(partner=False)),
                 make_job(clock, "past-max", run_at=later, attempt=1, error=failed_throttled),
                 make_job(clock, "due-already", run_at=now - timedelta(seconds=5),
                          error=_given_back()),
                 make_job(clock, "elsewhere", queue="other", run_at=later, error=_given_back()))
    await store.backoff_replace(queue=Q, backoffs=[_pause(clock, None)])

    clock.advance(10)
    assert await store.backoff_clear(queue=Q, now=clock.now()) == 1
    assert await store.backoff_list(queues=[Q]) == []
    run_at = {j: (await store.job_get(Q, j)).run_at  # type: ignore[union-attr]
              for j in ("held", "held-long", "run-after", "retrying", "producer", "past-max",
                        "due-already")}
    assert run_at == {"held": clock.now(), "held-long": clock.now(), "run-after": later,
                      "retrying": later, "producer": later, "past-max": later,
                      "due-already": now - timedelta(seconds=5)}
    moved = await store.job_get(Q, "held")
    assert moved is not None
    assert (moved.status, moved.attempt, moved.error) == ("queued", 0, _given_back())
    assert moved.updated_at == clock.now()
    assert (await store.job_get("other", "elsewhere")).run_at == later  # type: ignore[union-attr]
    due = await store.job_fetch_due(queue=Q, now=clock.now(), limit=10,
                                    ordering=Ordering.TIME_THEN_PRIORITY)
    assert {j.id for j in due} == {"held", "held-long", "due-already"}

    # without ``now`` (the pauses alone), nothing is moved
    await insert(store, make_job(clock, "again", run_at=clock.now() + timedelta(seconds=60),
                                 error=_given_back()))
    assert await store.backoff_clear(queue=Q) == 0
    assert (await store.job_get(Q, "again")).run_at > clock.now()  # type: ignore[union-attr]


async def test_what_an_owner_learned_is_saved_whole(store: Store, clock: FakeClock) -> None:
    t0 = clock.now()
    learned = QueueState(queue=Q, effective=2.5, successes=3, decreased_at=t0,
                         held={"capacity": 2, "window": 1}, held_at=t0, throttled_total=7,
                         learned_rate=81.5, learned_since=t0,
                         budget={"saved_at": "2026-01-05T12:00:00+00:00", "accounts": []})
    await store.queue_state_save([learned, QueueState(queue="other", throttled_total=1)])
    assert await store.queue_state_list(queues=[Q]) == {Q: learned}
    assert set(await store.queue_state_list()) == {Q, "other"}
    assert await store.queue_state_list(queues=["nobody"]) == {}

    await store.queue_state_save([QueueState(queue=Q, throttled_total=8)])  # whole: no merge
    assert await store.queue_state_list(queues=[Q]) == {Q: QueueState(queue=Q,
                                                                       throttled_total=8)}


async def test_launch_events_are_restamped_and_replaced(store: Store, clock: FakeClock) -> None:
    t0 = clock.now()
    await insert(store, *(make_job(clock, f"j{i}") for i in range(3)))
    await store.job_mark_running_many(queue=Q, ids=["j0", "j1"], now=t0, owner=OWNER,
                                      heartbeat_seconds=None, rate_groups={"j0": "g", "j1": "g"})
    t1 = clock.advance(10)
    await store.job_mark_running_many(queue=Q, ids=["j2"], now=t1, owner=OWNER,
                                      heartbeat_seconds=None, rate_groups={"j2": "g"})
    since = t0 - timedelta(seconds=1)

    # an adoption: the dead owner's launches (before t0 + 5) as if made at t0 + 5
    assert await store.launch_events_restamp(queue=Q, at=t0 + timedelta(seconds=5)) == 2
    assert await store.launch_events_restamp(queue="other", at=t1) == 0
    recent = await store.launch_events_recent(queue=Q, since=since)
    assert sorted(recent["g"]) == [t0 + timedelta(seconds=5)] * 2 + [t1]

    # a handover: the launches from t1 on replaced by the owner's own
    await store.launch_events_replace(queue=Q, since=t1, events=[
        ("g", t1 + timedelta(seconds=1)), ("h", t1 + timedelta(seconds=2))])
    recent = await store.launch_events_recent(queue=Q, since=since)
    assert {group: sorted(times) for group, times in recent.items()} == {
        "g": [t0 + timedelta(seconds=5)] * 2 + [t1 + timedelta(seconds=1)],
        "h": [t1 + timedelta(seconds=2)]}
    await store.launch_events_replace(queue=Q, since=since, events=[])
    assert await store.launch_events_recent(queue=Q, since=since) == {}

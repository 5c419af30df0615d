"""What the owners of queues keep in the store besides jobs, on every store (SQLite,
PostgreSQL, memory): a partner's pauses per scope (replaced whole by the owner,
cleared by a resume), what the owner learned of its queue, and the launch events
of rate limits moved by an adoption or a handover (hipq.engine.rates)."""

from __future__ import annotations

from datetime import timedelta

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


async def test_what_an_owner_learned_is_saved_whole(store: Store, clock: FakeClock) -> None:
    t0 = clock.now()
    learned = QueueState(queue=Q, effective=2.5, successes=3, decreased_at=t0,
                         held={"capacity": 2, "window": 1}, held_at=t0, throttled_total=7,
                         learned_rate=81.5, learned_since=t0)
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

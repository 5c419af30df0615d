"""Aging (docs/throttling.md): with ``aging_seconds`` a low-priority job eventually beats newer
high-priority ones. Critical jobs: their own ``critical_concurrency``, never blocked
by the quotas or rate limits of normal jobs."""

from __future__ import annotations

from hipq.bodies import EnqueueRequest
from tests.throttling._helpers import Harness, fresh_id, queue


async def test_aging_lets_a_low_priority_job_beat_newer_high_priority_ones(
        h: Harness) -> None:
    """Two queues side by side, one with aging: a stream of priority-0 jobs (more
    than capacity) keeps coming; the priority-3 job launches only where it ages."""
    aged, plain = fresh_id("aged"), fresh_id("plain")
    for queue_id, aging in ((aged, 10.0), (plain, None)):
        await h.hipq.create_queue(queue(queue_id, concurrency=1,
                                        ordering="priority_then_time", aging_seconds=aging))
        await h.hipq.enqueue(queue_id, "low", EnqueueRequest(priority=3))
    for n in range(24):
        for queue_id in (aged, plain):
            await h.hipq.enqueue_many(queue_id, [(f"high{n:02d}{i}", EnqueueRequest(priority=0))
                                                 for i in range(2)])
        await h.tick()
        for queue_id in (aged, plain):
            h.queue_id = queue_id
            await h.finish_running()
        h.clock.advance(5)
    by_queue = {q: [j.id for j in h.target.launched if j.queue == q] for q in (aged, plain)}
    assert "low" in by_queue[aged]
    # it beats the high-priority jobs enqueued 30 s (3 x aging_seconds) after it
    assert by_queue[aged].index("low") < by_queue[aged].index("high060")
    assert "low" not in by_queue[plain]


async def test_critical_jobs_skip_quotas_rate_limits_and_capacity(h: Harness) -> None:
    await h.create(concurrency=2, critical_concurrency=1,
                   quotas={"field": "region", "shares": {"a": 0.5, "b": 0.5}},
                   rate_limit={"launches": 2, "per_seconds": 3600})
    await h.enqueue_many([(i, EnqueueRequest(data={"region": i[0]}))
                          for i in ("a0", "a1", "b0", "b1")])
    assert sorted(j.id for j in await h.tick()) == ["a0", "b0"]
    # capacity, a's quota and the rate are all used up; critical jobs still go,
    # bounded by their own capacity of 1
    await h.enqueue("crit-a", data={"region": "a"}, critical=True)
    await h.enqueue("crit-b", data={"region": "b"}, critical=True)
    h.clock.advance(1)
    assert [j.id for j in await h.tick()] == ["crit-a"]
    h.clock.advance(1)
    assert await h.tick() == []
    await h.finish_running(["crit-a"])
    h.clock.advance(1)
    await h.tick()
    assert "crit-b" in h.launched_ids()
    # normal jobs stay held by the rate limit although capacity is free again
    await h.finish_running()
    for _ in range(3):
        h.clock.advance(60)
        await h.tick()
    assert sorted(h.launched_ids()) == ["a0", "b0", "crit-a", "crit-b"]
    h.clock.advance(3600)
    assert sorted(j.id for j in await h.tick()) == ["a1", "b1"]


async def test_critical_jobs_are_not_starved_by_normal_ones(h: Harness) -> None:
    """Critical jobs come first whatever the normal backlog: with priority ordering
    a critical job of the worst priority still launches at once."""
    await h.create(concurrency=3, critical_concurrency=2, ordering="priority_then_time")
    await h.enqueue_many([(f"n{i:02d}", EnqueueRequest(priority=0)) for i in range(30)])
    await h.enqueue("crit", priority=1000, critical=True)
    launched = sorted(j.id for j in await h.tick())
    assert launched == ["crit", "n00", "n01", "n02"]

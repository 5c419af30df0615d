"""A partner that refuses without saying why (docs/throttling.md, "Partners": the
defaults), in the engine, with the clock moved by hand: a bare 429 pauses nothing
and spends nothing, it lowers the queue's launch rate (once a round), launches are
paced at that rate in small groups, and what was learned survives a new owner and
is forgotten when the partner stops refusing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hipq.engine import Reconciler
from hipq.jobs import Job, JobState
from hipq.partners.learning import BETA, FORGET_ABOVE, K_SECONDS, PACE_SECONDS
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Accepted, Completed, LaunchOutcome, Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, job, queue, tick


def refuse(only: set[str] | None = None) -> Any:
    """A behaviour: a bare 429 (no time, no budget headers) for every launch, or only
    for the jobs in ``only`` (the others are accepted)."""

    def answer(j: Job) -> LaunchOutcome:
        if only is not None and j.id not in only:
            return Accepted()
        return Completed(status="throttled", kind="throttled",
                         error={"detail": "HTTP 429 from http://partner", "status": 429})

    return answer


async def test_a_bare_refusal_pauses_nothing_and_teaches_a_rate(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue(concurrency=60, attempts=1))
    for i in range(40):
        await enqueue(hipq, f"j{i:02d}")
    target.behaviour = refuse(only={"j00", "j01", "j02"})
    assert (await tick(reconciler)).launched == 40  # nothing learned yet: no limit
    clock.advance(0.05)
    result = await tick(reconciler)  # three refusals of one round
    assert result.throttled == 3
    assert await store.backoff_list(queues=["q"]) == []  # no pause
    refused = await job(hipq, "j00")
    assert refused.status is JobState.QUEUED
    assert refused.attempt == 0  # spent nothing
    assert refused.run_at == clock.now()  # due again at once: the pace holds it
    # 40 launched at one instant, measured over a quarter of the 2 s window: 80 a
    # second were refused (stored), and the rate drops to BETA of it, once
    state = (await store.queue_state_list(queues=["q"]))["q"]
    assert state.learned_rate is not None
    assert abs(state.learned_rate - 40 / 0.5) < 1e-6
    assert state.learned_since == clock.now()
    assert state.throttled_total == 3
    rate = reconciler.partner.learned_rate("q", clock.now())
    assert rate is not None
    assert abs(rate - 40 / 0.5 * BETA) < 1e-6


async def test_launches_go_in_small_groups_at_the_learned_rate(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue(concurrency=1000, attempts=1))
    for i in range(400):
        await enqueue(hipq, f"j{i:03d}")
    target.behaviour = refuse(only={"j000"})
    assert (await tick(reconciler)).launched == 400
    clock.advance(0.05)
    await tick(reconciler)  # the refusal: j000 is due again
    target.behaviour = None
    for i in range(400, 1400):
        await enqueue(hipq, f"j{i:04d}")
    rate = reconciler.partner.learned_rate("q", clock.now())
    assert rate is not None
    group = max(1, int(rate * PACE_SECONDS))
    result = await tick(reconciler)
    assert 1 <= result.launched <= group + 1
    assert result.wake_at is not None  # the next group's time
    assert clock.now() < result.wake_at <= clock.now() + timedelta(seconds=PACE_SECONDS)
    assert (await tick(reconciler)).launched == 0  # the same instant: nothing more
    launched = 0
    for _ in range(20):  # one second, in steps of the pace
        clock.advance(PACE_SECONDS)
        launched += (await tick(reconciler)).launched
    now_rate = reconciler.partner.learned_rate("q", clock.now())
    assert now_rate is not None
    assert launched <= now_rate * 1.0 + group + 1  # never above the curve's rate
    assert launched >= rate * 0.9  # and the pace is kept
    held = (await store.queue_state_list(queues=["q"]))["q"].held or {}
    assert held.get("partner", 0) > 0 or launched > 0


async def test_refusals_of_one_round_lower_the_rate_once(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue(concurrency=100, attempts=1))
    for i in range(50):
        await enqueue(hipq, f"j{i:02d}")
    target.behaviour = refuse()
    await tick(reconciler)  # 50 launched, all refused
    clock.advance(0.05)
    await tick(reconciler)
    first = (await store.queue_state_list(queues=["q"]))["q"].learned_rate
    assert first is not None
    for _ in range(5):  # those tries are back, launched after the decrease: new rounds
        clock.advance(1)
        await tick(reconciler)
    later = (await store.queue_state_list(queues=["q"]))["q"].learned_rate
    assert later is not None
    assert later < first
    for i in range(50):  # a refusal spends nothing: attempt counts the running try only
        found = await job(hipq, f"j{i:02d}")
        assert found.attempt == (1 if found.status is JobState.RUNNING else 0)


async def test_the_learned_rate_survives_a_new_owner_and_is_forgotten_later(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue(concurrency=100, attempts=1))
    for i in range(20):
        await enqueue(hipq, f"j{i:02d}")
    target.behaviour = refuse(only={"j00"})
    await tick(reconciler)
    clock.advance(0.05)
    await tick(reconciler)
    reconciler.leases.releasing.add("q")  # a handover
    await tick(reconciler)
    learned = reconciler.partner.learned_rate("q", clock.now())
    assert learned is not None

    other = MemoryTarget()
    successor = Reconciler(store, clock=clock, owner="o2",
                           targets=Targets(memory={"t": other}))
    await tick(successor)
    assert successor.partner.learned_rate("q", clock.now()) == learned
    # no refusal for long: the curve climbs past FORGET_ABOVE x the refused rate
    clock.advance(K_SECONDS * (1 + FORGET_ABOVE))
    await tick(successor)
    assert successor.partner.learned_rate("q", clock.now()) is None
    await tick(successor)
    state = (await store.queue_state_list(queues=["q"]))["q"]
    assert state.learned_rate is None
    assert state.learned_since is None


async def test_a_refusal_with_a_time_still_pauses_the_queue(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue(concurrency=10, attempts=1))
    await enqueue(hipq, "a")

    def answer(j: Job) -> LaunchOutcome:
        return Completed(status="throttled", kind="throttled",
                         error={"detail": "HTTP 429", "status": 429, "retry_after": 7})

    target.behaviour = answer
    await tick(reconciler)
    await tick(reconciler)
    paused = await store.backoff_list(queues=["q"])
    assert [p.until for p in paused] == [clock.now() + timedelta(seconds=7)]
    assert reconciler.partner.learned_rate("q", clock.now()) is None

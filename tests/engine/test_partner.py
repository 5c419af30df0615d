"""The partner's word (docs/throttling.md), in the engine, on each database, with the clock
moved by hand: throttled tries given back, pauses per scope, budgets spent,
adaptive concurrency, held counts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hipq.bodies import ResponseRequest
from hipq.engine import Reconciler
from hipq.jobs import Job, JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Accepted, Completed, LaunchOutcome, Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, history, job, queue, respond, tick


def throttle(after: Any = None, *, only: set[str] | None = None) -> Any:
    """A behaviour: a 429 (with ``retry_after`` if given) for every launch, or only for
    the jobs in ``only`` (the others are accepted)."""

    def answer(j: Job) -> LaunchOutcome:
        if only is not None and j.id not in only:
            return Accepted()
        error: dict[str, Any] = {"detail": "HTTP 429 from http://partner", "status": 429}
        if after is not None:
            error["retry_after"] = after
        return Completed(status="throttled", kind="throttled", error=error)

    return answer


async def pauses(store: Store, queue_id: str = "q") -> dict[str | None, Any]:
    return {b.group: b for b in await store.backoff_list(queues=[queue_id])}


async def test_a_throttled_try_is_given_back_and_pauses_the_queue(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue(attempts=2))
    await enqueue(hipq, "a")
    await enqueue(hipq, "b")
    target.behaviour = throttle(4, only={"a"})
    first = await job(hipq, "a")
    assert (await tick(reconciler)).launched == 2
    result = await tick(reconciler)  # step 3 persists the throttled try
    assert result.throttled == 1
    stored = await job(hipq, "a")
    assert stored.status is JobState.QUEUED
    assert stored.attempt == 0  # not spent
    assert stored.run_at == clock.now() + timedelta(seconds=4)
    assert stored.token != first.token  # its callback URL completes no later try
    assert [t.outcome for t in await history(hipq, "a")] == ["throttled"]
    paused = await pauses(store)
    assert paused[None].until == clock.now() + timedelta(seconds=4)
    assert paused[None].reason == "HTTP 429 from http://partner"
    assert result.wake_at == clock.now() + timedelta(seconds=4)

    await enqueue(hipq, "c")  # due now, but the queue is paused
    clock.advance(3.5)
    assert (await tick(reconciler)).launched == 0
    clock.advance(0.5)
    target.behaviour = None
    launched = await tick(reconciler)
    assert launched.launched == 2  # a (due again) and c
    assert (await job(hipq, "a")).attempt == 1


async def test_without_a_time_the_back_off_doubles_per_round_up_to_the_max(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue(attempts=1, backoff={"initial_seconds": 1,
                                                       "max_seconds": 5, "learn": False}))
    for i in range(3):
        await enqueue(hipq, f"j{i}")
    target.behaviour = throttle()
    waits = []
    for _ in range(5):
        launched = await tick(reconciler)
        assert launched.launched >= 1
        await tick(reconciler)  # persisted: paused
        until = (await pauses(store))[None].until
        waits.append((until - clock.now()).total_seconds())
        clock.set(until)
    # the three tries of the first round were in flight together: one doubling
    assert waits == [1, 2, 4, 5, 5]
    for i in range(3):
        assert (await job(hipq, f"j{i}")).status is JobState.QUEUED  # never spent


async def test_past_max_throttled_a_try_counts_as_failed(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock) -> None:
    await hipq.create_queue(queue(attempts=1, backoff={"max_throttled": 2}))
    await enqueue(hipq, "a")
    target.behaviour = throttle(1)
    for _ in range(2):
        await tick(reconciler)
        await tick(reconciler)
        assert (await job(hipq, "a")).status is JobState.QUEUED
        clock.advance(1)
    await tick(reconciler)
    await tick(reconciler)
    done = await job(hipq, "a")
    assert done.status is JobState.FAILED  # its one attempt spent on the third 429
    assert done.error is not None
    assert done.error["kind"] == "throttled"
    assert [t.outcome for t in await history(hipq, "a")] == ["throttled"] * 3


async def test_group_scope_pauses_only_its_group(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue(backoff={"scope": "group", "field": "key"}))
    await enqueue(hipq, "a1", data={"key": "a"})
    target.behaviour = throttle(10)
    await tick(reconciler)
    await tick(reconciler)
    assert set(await pauses(store)) == {"a"}
    target.behaviour = None
    await enqueue(hipq, "a2", data={"key": "a"})
    await enqueue(hipq, "b1", data={"key": "b"})
    await enqueue(hipq, "n1", data={})
    await tick(reconciler)
    assert target.ids()[1:] == ["b1", "n1"]  # a's jobs wait for a's pause
    clock.advance(10)
    await tick(reconciler)
    assert sorted(target.ids()[3:]) == ["a1", "a2"]


async def test_a_budget_spent_pauses_before_any_refusal(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue(concurrency=1))
    for i in range(3):
        await enqueue(hipq, f"j{i}")
    target.behaviour = lambda j: Completed(status="succeeded", spent=3.0)
    await tick(reconciler)
    result = await tick(reconciler)  # j0 succeeded, the budget is spent for 3 s
    assert (await job(hipq, "j0")).status is JobState.SUCCEEDED
    paused = await pauses(store)
    assert paused[None].reason == "budget spent"
    assert paused[None].until == clock.now() + timedelta(seconds=3)
    assert result.launched == 0
    clock.advance(2.5)
    assert (await tick(reconciler)).launched == 0
    clock.advance(0.5)
    assert (await tick(reconciler)).launched == 1


async def test_an_accepted_launch_that_spends_the_budget_pauses_too(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    target.behaviour = lambda j: Accepted(spent=2.0)
    await tick(reconciler)
    await tick(reconciler)
    assert (await pauses(store))[None].until == clock.now() + timedelta(seconds=2)


async def test_an_asynchronous_throttled_answer_is_given_back(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, store: Store) -> None:
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    await tick(reconciler)
    key = (await job(hipq, "a")).correlation_key
    assert key is not None
    await hipq.report_response(key, ResponseRequest(status="throttled", retry_after_seconds=2),
                               source="kafka")  # the partner's answer (a Kafka response)
    await tick(reconciler)
    stored = await job(hipq, "a")
    assert (stored.status, stored.attempt) == (JobState.QUEUED, 0)
    assert stored.run_at == clock.now() + timedelta(seconds=2)
    assert (await pauses(store))[None].until == clock.now() + timedelta(seconds=2)


async def test_resume_ends_a_partners_pause(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    await enqueue(hipq, "b", run_after=clock.now() + timedelta(seconds=1))
    target.behaviour = throttle(600, only={"a"})
    await tick(reconciler)
    await tick(reconciler)
    assert await pauses(store)
    clock.advance(1)
    await hipq.set_paused("q", False)
    assert await pauses(store) == {}
    assert (await job(hipq, "a")).run_at == clock.now()  # the partner's 600 s are over
    target.behaviour = None
    assert (await tick(reconciler)).launched == 2  # b, and a: a resume makes it due


async def test_a_pause_survives_a_handover(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    target.behaviour = throttle(30)
    await tick(reconciler)
    await tick(reconciler)
    reconciler.leases.releasing.add("q")
    await tick(reconciler)  # released
    await enqueue(hipq, "b")
    other = MemoryTarget()
    successor = Reconciler(store, clock=clock, owner="o2",
                           targets=Targets(memory={"t": other}))
    clock.advance(5)
    await tick(successor)
    assert other.ids() == []  # the pause holds for the next owner
    clock.advance(25)
    await tick(successor)
    assert sorted(other.ids()) == ["a", "b"]


async def test_adaptive_concurrency_decreases_once_a_round_and_grows_back(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue(concurrency=8, attempts=5,
                                  backoff={"initial_seconds": 1, "learn": False},
                                  adaptive={"min": 1, "increase_every": 2,
                                            "decrease": 0.5}))
    for i in range(40):
        await enqueue(hipq, f"j{i:02d}")
    target.behaviour = throttle()
    assert (await tick(reconciler)).launched == 8
    await tick(reconciler)  # eight refusals of one round: one decrease
    states = await store.queue_state_list(queues=["q"])
    assert states["q"].effective == 4
    assert states["q"].throttled_total == 8
    clock.advance(1)
    target.behaviour = None
    assert (await tick(reconciler)).launched == 4
    assert len(reconciler.batch) == 4
    for _ in range(4):
        running = [h for h in reconciler.batch.values() if h.outcome is None]
        await respond(hipq, running[0].id, status="succeeded")
        await tick(reconciler)
    # four successes at increase_every 2: 4 -> 5 -> 6
    assert (await store.queue_state_list(queues=["q"]))["q"].effective == 6
    assert len([h for h in reconciler.batch.values() if h.outcome is None]) == 6


async def test_a_timeout_lowers_the_adaptive_limit(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, store: Store) -> None:
    await hipq.create_queue(queue(concurrency=10, timeout_seconds=5,
                                  adaptive={"decrease": 0.5}))
    await enqueue(hipq, "a")
    await tick(reconciler)
    clock.advance(6)
    await tick(reconciler)
    assert (await store.queue_state_list(queues=["q"]))["q"].effective == 5


async def test_the_adaptive_limit_survives_a_new_owner(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue(concurrency=6, adaptive={"decrease": 0.5}))
    for i in range(20):
        await enqueue(hipq, f"j{i:02d}")
    target.behaviour = throttle(1, only={"j00"})
    await tick(reconciler)
    await tick(reconciler)
    reconciler.leases.releasing.add("q")
    await tick(reconciler)
    other = MemoryTarget()
    successor = Reconciler(store, clock=clock, owner="o2",
                           targets=Targets(memory={"t": other}))
    clock.advance(1)
    await tick(successor)
    # effective 3: five still run (accepted, adopted), so nothing more launches
    assert other.ids() == []
    assert successor.partner.effective(
        (await hipq.get_queue("q")).spec) == 3


async def test_held_counts_by_reason_are_stored_with_the_queue(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, store: Store) -> None:
    await hipq.create_queue(queue(concurrency=2, rate_limit={"launches": 3,
                                                             "per_seconds": 60}))
    for i in range(5):
        await enqueue(hipq, f"j{i}")
    await enqueue(hipq, "k1", ordering_key="k")
    await enqueue(hipq, "k2", ordering_key="k")
    await tick(reconciler)  # two launch: capacity is full
    await tick(reconciler)  # nothing fetched: the due jobs are counted (bounded)
    held = (await store.queue_state_list(queues=["q"]))["q"].held
    assert held == {"concurrency": 5}
    clock.advance(2)
    running = [h.id for h in reconciler.batch.values() if h.outcome is None]
    for job_id in running:
        await respond(hipq, job_id, status="succeeded")
    await tick(reconciler)  # one more launch (3 per minute), the rest rate limited
    clock.advance(2)
    await tick(reconciler)
    held = (await store.queue_state_list(queues=["q"]))["q"].held
    assert held is not None
    assert held.get("rate_limit", 0) >= 1


def test_held_counts_the_same_on_the_built_ins_fast_path(clock: FakeClock) -> None:
    from hipq.engine.decide import held_reasons
    from hipq.plugins import ThrottleResult

    now = clock.now()
    jobs = [Job(id=f"j{i}", queue="q", run_at=now, created_at=now, updated_at=now)
            for i in range(10)]
    decision = ThrottleResult(launch=jobs[:3], held={"j3": "concurrency", "j4": "quota",
                                                     "j5": "concurrency", "j6": "window"})
    launched = [j.id for j in jobs[:3]]
    slow = held_reasons(jobs, decision, launched, {"backoff": 2})
    fast = held_reasons(jobs, decision, launched, {"backoff": 2}, trusted=True)
    assert slow == fast == {"backoff": 2, "concurrency": 2, "quota": 1, "window": 1,
                            "throttler": 3}

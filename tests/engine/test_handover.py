"""Fair spread and clean handovers between reconcilers sharing one store (docs/scaling.md),
on both databases, with the clock moved by the test."""

from __future__ import annotations

import asyncio

from hipq.config import ReconcileConfig
from hipq.engine import Reconciler
from hipq.jobs import Job, JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Accepted, LaunchOutcome, Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, history, job, queue, respond, tick

LEASE = ReconcileConfig(lease_seconds=30)  # renewed every 10 s


def _reconciler(store: Store, clock: FakeClock, owner: str, target: MemoryTarget) -> Reconciler:
    return Reconciler(store, clock=clock, owner=owner, config=LEASE,
                      targets=Targets(memory={"t": target}))


async def _owners(store: Store) -> dict[str, str]:
    return {q: owner for q, (owner, _) in (await store.lease_list()).items()}


async def test_a_joining_daemon_gets_a_queue_with_its_confirmed_running_job(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    first_target, second_target = MemoryTarget(), MemoryTarget()
    first = _reconciler(store, clock, "o1", first_target)
    second = _reconciler(store, clock, "o2", second_target)
    await hipq.create_queue(queue("a"))
    await hipq.create_queue(queue("b"))
    await enqueue(hipq, "a1", "a")
    await enqueue(hipq, "b1", "b")
    await tick(first)
    assert first.held == {"a", "b"}
    assert sorted(first_target.ids()) == ["a1", "b1"]

    await tick(second)  # registered; both queues are held: nothing to take yet
    assert second.held == set()
    clock.advance(11)
    await tick(first)  # two live daemons: share 1; b is handed over at once (idle)
    assert first.held == {"a"}
    assert await _owners(store) == {"a": "o1"}
    result = await tick(second)
    assert second.held == {"b"}
    assert result.adopted == 1

    adopted = await job(hipq, "b1", "b")
    assert (adopted.status, adopted.owner, adopted.attempt) == (JobState.RUNNING, "o2", 1)
    await respond(hipq, "b1", "b", result="ok")
    await tick(second)
    assert (await job(hipq, "b1", "b")).status is JobState.SUCCEEDED
    assert [a.outcome for a in await history(hipq, "b1", "b")] == ["succeeded"]
    assert second_target.launched == []  # nothing re-sent


async def test_a_handover_waits_for_the_launches_in_flight(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    release = asyncio.Event()

    async def slow(launched: Job) -> LaunchOutcome:
        await release.wait()
        return Accepted()

    first = _reconciler(store, clock, "o1", MemoryTarget(slow))
    second = _reconciler(store, clock, "o2", MemoryTarget())
    await hipq.create_queue(queue("a"))
    await hipq.create_queue(queue("b"))
    await tick(first)  # holds both
    await tick(second)
    await enqueue(hipq, "b1", "b")
    await first.run_once()  # b1 launching, not yet confirmed
    clock.advance(11)
    await enqueue(hipq, "b2", "b")

    result = await first.run_once()  # b is being handed over: no fetch, not released yet
    assert result.launched == 0
    assert first.held == {"a"}
    assert first.leases.releasing == {"b"}
    assert (await _owners(store))["b"] == "o1"
    assert (await tick(second)).adopted == 0
    assert second.held == set()

    release.set()
    await first.drain()  # the launch is confirmed
    await first.run_once()
    assert first.leases.releasing == set()
    assert "b" not in await _owners(store)
    clock.advance(11)
    result = await tick(second)
    assert second.held == {"b"}
    assert result.adopted == 1
    assert result.launched == 1  # b2, by the new owner
    b1 = await job(hipq, "b1", "b")
    assert (b1.status, b1.owner, b1.launch_confirmed) == (JobState.RUNNING, "o2", True)

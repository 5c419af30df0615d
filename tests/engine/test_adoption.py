"""Adoption of running jobs after their owner died (docs/scaling.md, "How the queues are
shared")."""

from __future__ import annotations

from typing import Any

import pytest

from hipq.config import ReconcileConfig
from hipq.engine import Reconciler
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, history, job, queue, respond, tick

LEASE = ReconcileConfig(lease_seconds=30)


async def _crash_after_launch(hipq: Hipq, reconciler: Reconciler, store: Store,
                              clock: FakeClock, **settings: Any) -> None:
    """Leave "confirmed" running and confirmed, and "unconfirmed" marked running by o1
    without its launch ever being confirmed, as if o1 died in between."""
    await hipq.create_queue(queue(retry={"strategy": "fixed", "delay_seconds": 0}, **settings))
    await enqueue(hipq, "confirmed")
    await tick(reconciler)
    await enqueue(hipq, "unconfirmed")
    await store.job_mark_running_many(queue="q", ids=["unconfirmed"], now=clock.now(),
                                      owner="o1", heartbeat_seconds=None)


@pytest.fixture
def target2() -> MemoryTarget:
    return MemoryTarget()


@pytest.fixture
def successor(store: Store, clock: FakeClock, target2: MemoryTarget) -> Reconciler:
    return Reconciler(store, clock=clock, owner="o2", config=LEASE,
                      targets=Targets(memory={"t": target2}))


async def test_nothing_is_adopted_while_the_lease_is_held(
        hipq: Hipq, reconciler: Reconciler, store: Store, clock: FakeClock,
        successor: Reconciler, target2: MemoryTarget) -> None:
    await _crash_after_launch(hipq, reconciler, store, clock)
    await enqueue(hipq, "waiting")

    clock.advance(29)
    result = await tick(successor)

    assert (result.adopted, result.launched) == (0, 0)
    assert successor.held == set()
    assert target2.launched == []


async def test_a_confirmed_launch_keeps_waiting_for_its_response(
        hipq: Hipq, reconciler: Reconciler, store: Store, clock: FakeClock,
        successor: Reconciler) -> None:
    await _crash_after_launch(hipq, reconciler, store, clock)
    clock.advance(31)

    assert (await tick(successor)).adopted == 2
    adopted = await job(hipq, "confirmed")
    assert (adopted.status, adopted.owner, adopted.attempt) == (JobState.RUNNING, "o2", 1)

    await respond(hipq, "confirmed", result="ok")
    assert (await tick(successor)).finished == 1
    assert (await job(hipq, "confirmed")).status is JobState.SUCCEEDED


async def test_an_unconfirmed_launch_is_lost_and_retried_at_least_once(
        hipq: Hipq, reconciler: Reconciler, store: Store, clock: FakeClock,
        successor: Reconciler, target2: MemoryTarget) -> None:
    await _crash_after_launch(hipq, reconciler, store, clock)
    clock.advance(31)

    result = await tick(successor)

    assert result.retried == 1
    lost = await job(hipq, "unconfirmed")
    assert (lost.status, lost.attempt) == (JobState.QUEUED, 1)
    assert [(t.attempt, t.outcome) for t in await history(hipq, "unconfirmed")] == [(1, "lost")]
    await tick(successor)
    assert [(j.id, j.attempt) for j in target2.launched] == [("unconfirmed", 2)]


async def test_an_unconfirmed_launch_fails_at_most_once(
        hipq: Hipq, reconciler: Reconciler, store: Store, clock: FakeClock,
        successor: Reconciler, target2: MemoryTarget) -> None:
    await _crash_after_launch(hipq, reconciler, store, clock, delivery_strategy="at_most_once")
    clock.advance(31)

    await tick(successor)
    await tick(successor)

    lost = await job(hipq, "unconfirmed")
    assert lost.status is JobState.FAILED
    assert lost.error is not None
    assert lost.error["kind"] == "lost"
    assert target2.launched == []


async def test_the_adopted_deadline_still_holds(
        hipq: Hipq, reconciler: Reconciler, store: Store, clock: FakeClock,
        successor: Reconciler) -> None:
    await _crash_after_launch(hipq, reconciler, store, clock, timeout_seconds=100)
    clock.advance(31)
    await tick(successor)

    clock.advance(69)
    result = await tick(successor)

    assert result.timed_out == 1
    assert (await job(hipq, "confirmed")).status is JobState.QUEUED


async def test_the_dead_owner_cannot_overwrite_adopted_jobs(
        hipq: Hipq, reconciler: Reconciler, store: Store, clock: FakeClock,
        successor: Reconciler) -> None:
    await _crash_after_launch(hipq, reconciler, store, clock)
    clock.advance(31)
    await tick(successor)
    await respond(hipq, "confirmed", status="failed", retryable=False)

    stale = await tick(reconciler)  # o1 comes back: the lease is o2's now

    assert stale.finished == 0
    assert reconciler.held == set()
    assert (await job(hipq, "confirmed")).status is JobState.RUNNING
    await tick(successor)
    assert (await job(hipq, "confirmed")).status is JobState.FAILED

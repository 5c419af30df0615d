"""Queue order, critical jobs, and throttler plugins (docs/throttling.md; docs/configuration.md,
"Plugins")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from hipq.engine import Reconciler
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.targets import Targets
from hipq.testing import FakeClock, MemoryTarget, succeed
from tests.engine._helpers import enqueue, job, queue, tick


async def _enqueue_mixed(hipq: Hipq, clock: FakeClock) -> None:
    """old: oldest, worst priority; urgent and soon: newer, same time, better priorities."""
    past = clock.now() - timedelta(seconds=10)
    await enqueue(hipq, "old", run_after=past, priority=200)
    await enqueue(hipq, "soon", run_after=past + timedelta(seconds=5), priority=5)
    await enqueue(hipq, "urgent", run_after=past + timedelta(seconds=5), priority=1)


@pytest.mark.parametrize(("ordering", "expected"), [
    ("time_then_priority", ["old", "urgent", "soon"]),
    ("priority_then_time", ["urgent", "soon", "old"]),
])
async def test_jobs_launch_in_the_queue_order(
        hipq: Hipq, store: Any, clock: FakeClock, ordering: str, expected: list[str]) -> None:
    target = MemoryTarget(succeed)  # each job ends at once, freeing the single slot
    reconciler = Reconciler(store, clock=clock, owner="o1", targets=Targets(memory={"t": target}))
    await hipq.create_queue(queue(concurrency=1, ordering=ordering))
    await _enqueue_mixed(hipq, clock)

    for _ in range(4):
        await tick(reconciler)

    assert target.ids() == expected


async def test_weights_count_against_concurrency(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    await hipq.create_queue(queue(concurrency=3))
    await enqueue(hipq, "a-heavy", weight=2)
    await enqueue(hipq, "b-heavy", weight=2)
    await enqueue(hipq, "c-light", weight=1)  # same run_at and priority: id order

    assert (await tick(reconciler)).launched == 1  # b-heavy does not fit; c-light waits behind

    assert target.ids() == ["a-heavy"]


async def test_a_critical_job_skips_a_full_normal_pool(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock) -> None:
    await hipq.create_queue(queue(concurrency=1, critical_concurrency=1))
    await enqueue(hipq, "busy")
    await tick(reconciler)
    for n in range(5):  # an older normal backlog, ahead of the critical job
        await enqueue(hipq, f"backlog{n}", run_after=clock.now() - timedelta(seconds=60))
    await enqueue(hipq, "vip", critical=True)

    assert (await tick(reconciler)).launched == 1

    assert target.ids() == ["busy", "vip"]
    assert (await job(hipq, "backlog0")).status is JobState.QUEUED


async def test_critical_jobs_are_bounded_by_critical_concurrency(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    await hipq.create_queue(queue(concurrency=5, critical_concurrency=2))
    for n in range(3):
        await enqueue(hipq, f"vip{n}", critical=True)
    await enqueue(hipq, "normal")

    assert (await tick(reconciler)).launched == 3

    assert sorted(target.ids()) == ["normal", "vip0", "vip1"]
    assert (await job(hipq, "vip2")).status is JobState.QUEUED


async def test_critical_jobs_do_not_use_normal_capacity(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    await hipq.create_queue(queue(concurrency=1, critical_concurrency=1))
    await enqueue(hipq, "vip", critical=True)
    await tick(reconciler)
    await enqueue(hipq, "normal")

    assert (await tick(reconciler)).launched == 1

    assert target.ids() == ["vip", "normal"]


async def test_max_per_tick_plugin(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    await hipq.create_queue(queue(throttler={"plugin": "hipq.contrib.throttlers:MaxPerTick",
                                             "options": {"limit": 2}}))
    for n in range(5):
        await enqueue(hipq, f"j{n}")

    launched = [(await tick(reconciler)).launched for _ in range(3)]

    assert launched == [2, 2, 1]
    assert target.ids() == ["j0", "j1", "j2", "j3", "j4"]


async def test_highest_priority_only_function_plugin(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    await hipq.create_queue(queue(throttler={
        "plugin": "hipq.contrib.throttlers:highest_priority_only"}))
    await enqueue(hipq, "low", priority=9)
    await enqueue(hipq, "top1", priority=1)
    await enqueue(hipq, "top2", priority=1)

    assert (await tick(reconciler)).launched == 2
    assert sorted(target.ids()) == ["top1", "top2"]
    assert (await tick(reconciler)).launched == 1
    assert target.ids()[-1] == "low"


async def test_a_raising_throttler_launches_nothing_that_tick(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    await hipq.create_queue(queue(throttler={"plugin": "tests.engine._plugins:FlakyThrottler"}))
    await hipq.create_queue(queue("other"))
    await enqueue(hipq, "a")
    await enqueue(hipq, "b", queue_id="other")

    failed = await tick(reconciler)
    assert (failed.throttler_errors, failed.launched) == (1, 1)  # the other queue goes on
    assert target.ids() == ["b"]
    assert (await job(hipq, "a")).status is JobState.QUEUED

    recovered = await tick(reconciler)
    assert (recovered.throttler_errors, recovered.launched) == (0, 1)
    assert target.ids() == ["b", "a"]

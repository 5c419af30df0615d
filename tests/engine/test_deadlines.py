"""Timeouts, heartbeats and expiry (docs/internals.md, "The tick: a plan", step 0)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hipq.engine import Reconciler
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, history, job, queue, respond, tick

RETRY_AT_ONCE = {"strategy": "fixed", "delay_seconds": 0}


async def _launch(hipq: Hipq, reconciler: Reconciler, **settings: Any) -> None:
    await hipq.create_queue(queue(retry=RETRY_AT_ONCE, **settings))
    await enqueue(hipq, "a")
    await tick(reconciler)


async def test_the_deadline_is_launch_plus_timeout(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    launched_at = clock.now()
    await _launch(hipq, reconciler, timeout_seconds=60)

    stored = await job(hipq, "a")

    assert (stored.launched_at, stored.deadline) == (launched_at,
                                                     launched_at + timedelta(seconds=60))


async def test_a_job_times_out_at_its_deadline_and_is_retried(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, target: MemoryTarget) -> None:
    await _launch(hipq, reconciler, timeout_seconds=60)
    clock.advance(59)
    assert (await tick(reconciler)).timed_out == 0

    clock.advance(1)
    result = await tick(reconciler)

    assert (result.timed_out, result.retried) == (1, 1)
    assert (await job(hipq, "a")).status is JobState.QUEUED
    (first,) = await history(hipq, "a")
    assert first.outcome == "timeout"
    assert first.error is not None
    assert first.error["kind"] == "timeout"
    await tick(reconciler)
    assert [(j.id, j.attempt) for j in target.launched] == [("a", 1), ("a", 2)]


async def test_a_response_received_before_the_deadline_wins_over_the_timeout(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    await _launch(hipq, reconciler, timeout_seconds=60)
    clock.advance(59)
    await respond(hipq, "a")

    clock.advance(5)  # the next tick comes after the deadline
    result = await tick(reconciler)

    assert (result.timed_out, result.finished) == (0, 1)
    assert (await job(hipq, "a")).status is JobState.SUCCEEDED


async def test_the_job_timeout_overrides_the_queue_timeout(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    await hipq.create_queue(queue(timeout_seconds=600))
    await enqueue(hipq, "a", timeout_seconds=5)
    await tick(reconciler)

    clock.advance(5)

    assert (await tick(reconciler)).timed_out == 1


async def test_a_heartbeat_pushes_the_deadline(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    await _launch(hipq, reconciler, timeout_seconds=60)
    clock.advance(30)
    await respond(hipq, "a", status="running", extend_seconds=100)

    assert (await tick(reconciler)).responses_applied == 1
    pushed = clock.now() + timedelta(seconds=100)
    assert (await job(hipq, "a")).deadline == pushed

    clock.set(pushed - timedelta(seconds=1))
    assert (await tick(reconciler)).timed_out == 0
    clock.set(pushed)
    assert (await tick(reconciler)).timed_out == 1


async def test_a_heartbeat_never_shortens_the_deadline(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    await _launch(hipq, reconciler, timeout_seconds=60)
    deadline = (await job(hipq, "a")).deadline
    await respond(hipq, "a", status="running", extend_seconds=5)

    await tick(reconciler)

    assert (await job(hipq, "a")).deadline == deadline


async def test_heartbeat_timeout_expects_a_beat_every_so_often(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    await _launch(hipq, reconciler, timeout_seconds=3600, heartbeat_timeout_seconds=30)
    clock.advance(20)
    await respond(hipq, "a", status="running")  # no extend_seconds: the queue's 30 s
    await tick(reconciler)
    assert (await job(hipq, "a")).deadline == clock.now() + timedelta(seconds=30)

    clock.advance(30)
    assert (await tick(reconciler)).timed_out == 1


async def test_a_job_then_succeeds_after_heartbeats(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    await _launch(hipq, reconciler, timeout_seconds=60)
    for _ in range(3):
        clock.advance(50)
        await respond(hipq, "a", status="running", extend_seconds=60)
        await tick(reconciler)
    await respond(hipq, "a", result="done")

    assert (await tick(reconciler)).finished == 1
    assert (await job(hipq, "a")).status is JobState.SUCCEEDED


async def test_a_job_expiring_before_launch_is_never_launched(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, target: MemoryTarget) -> None:
    await hipq.create_queue(queue())
    await enqueue(hipq, "a", run_after=clock.now() + timedelta(seconds=20),
                  expires_at=clock.now() + timedelta(seconds=10))

    clock.advance(20)
    result = await tick(reconciler)

    assert (result.expired, result.launched) == (1, 0)
    stored = await job(hipq, "a")
    assert stored.status is JobState.EXPIRED
    assert stored.error is not None
    assert stored.error["kind"] == "expired"
    assert target.launched == []


async def test_an_already_expired_job_is_accepted_then_expires(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, target: MemoryTarget) -> None:
    await hipq.create_queue(queue())
    await enqueue(hipq, "a", expires_at=clock.now() - timedelta(seconds=1))

    assert (await tick(reconciler)).expired == 1
    assert (await job(hipq, "a")).status is JobState.EXPIRED
    assert target.launched == []


async def test_an_expired_job_far_back_in_the_backlog_is_swept(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    await hipq.create_queue(queue(concurrency=1))
    await enqueue(hipq, "busy")
    await tick(reconciler)  # the queue is full: nothing more is fetched
    for n in range(30):
        await enqueue(hipq, f"backlog{n}")
    await enqueue(hipq, "last", run_after=clock.now() + timedelta(seconds=5),
                  expires_at=clock.now() + timedelta(seconds=10))

    clock.advance(10)
    result = await tick(reconciler)

    assert (result.fetched, result.expired) == (0, 1)
    assert (await job(hipq, "last")).status is JobState.EXPIRED
    assert (await job(hipq, "backlog0")).status is JobState.QUEUED

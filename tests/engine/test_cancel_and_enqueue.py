"""Cancellation (``DELETE``) and idempotent enqueue (docs/http-api.md)."""

from __future__ import annotations

import pytest

from hipq.bodies import EnqueueRequest
from hipq.engine import Reconciler
from hipq.errors import ConflictError
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.store import InsertStatus
from hipq.testing import MemoryTarget
from tests.engine._helpers import enqueue, history, job, queue, respond, tick


@pytest.fixture(autouse=True)
async def _queue(hipq: Hipq) -> None:
    await hipq.create_queue(queue())


async def test_cancelling_a_queued_job_is_immediate(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    await enqueue(hipq, "a")

    cancelled = await hipq.cancel("q", "a")

    assert cancelled.status is JobState.CANCELLED
    assert (await job(hipq, "a")).status is JobState.CANCELLED
    await tick(reconciler)
    assert target.launched == []


async def test_cancelling_a_running_job_applies_at_the_next_tick(
        hipq: Hipq, reconciler: Reconciler) -> None:
    await enqueue(hipq, "a")
    await tick(reconciler)

    asked = await hipq.cancel("q", "a")
    assert asked.status is JobState.RUNNING
    result = await tick(reconciler)

    assert result.finished == 1
    assert (await job(hipq, "a")).status is JobState.CANCELLED
    assert [t.outcome for t in await history(hipq, "a")] == ["cancelled"]


async def test_a_cancelled_running_job_is_not_retried(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    await enqueue(hipq, "a")
    await tick(reconciler)
    await hipq.cancel("q", "a")
    await tick(reconciler)

    await tick(reconciler)

    assert target.ids() == ["a"]


async def test_a_finished_job_cannot_be_cancelled(
        hipq: Hipq, reconciler: Reconciler) -> None:
    await enqueue(hipq, "a")
    await tick(reconciler)
    await respond(hipq, "a")
    await tick(reconciler)

    with pytest.raises(ConflictError):
        await hipq.cancel("q", "a")
    assert (await job(hipq, "a")).status is JobState.SUCCEEDED


async def test_the_same_enqueue_twice_returns_the_existing_job(hipq: Hipq) -> None:
    first = await enqueue(hipq, "a", data={"x": 1}, priority=5)

    again = await enqueue(hipq, "a", data={"x": 1}, priority=5)

    assert (first.status, again.status) == (InsertStatus.CREATED, InsertStatus.EXISTS)
    assert first.job is not None
    assert again.job == first.job


async def test_the_same_id_with_another_body_conflicts(hipq: Hipq) -> None:
    await enqueue(hipq, "a", data={"x": 1})

    with pytest.raises(ConflictError):
        await enqueue(hipq, "a", data={"x": 2})
    assert (await job(hipq, "a")).data == {"x": 1}


async def test_enqueue_stays_idempotent_after_the_job_is_archived(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    await enqueue(hipq, "a", data={"x": 1})
    await tick(reconciler)
    await respond(hipq, "a")
    await tick(reconciler)

    again = await enqueue(hipq, "a", data={"x": 1})
    assert again.status is InsertStatus.EXISTS
    assert again.job is not None
    assert again.job.status is JobState.SUCCEEDED
    with pytest.raises(ConflictError):
        await enqueue(hipq, "a", data={"x": 2})

    await tick(reconciler)
    assert target.ids() == ["a"]
    assert (await job(hipq, "a")).status is JobState.SUCCEEDED


async def test_a_batch_reports_each_item(hipq: Hipq) -> None:
    await enqueue(hipq, "a", data={"x": 1})

    outcomes = await hipq.enqueue_many("q", [
        ("a", EnqueueRequest(data={"x": 1})), ("b", EnqueueRequest()),
        ("a", EnqueueRequest(data={"x": 2}))])

    assert [o.status for o in outcomes] == [InsertStatus.EXISTS, InsertStatus.CREATED,
                                            InsertStatus.CONFLICT]


async def test_a_new_id_repeated_in_one_batch_keeps_the_first_body(hipq: Hipq) -> None:
    outcomes = await hipq.enqueue_many("q", [
        ("a", EnqueueRequest(data={"x": 1})), ("a", EnqueueRequest(data={"x": 1})),
        ("a", EnqueueRequest(data={"x": 2}))])

    assert [o.status for o in outcomes] == [InsertStatus.CREATED, InsertStatus.EXISTS,
                                            InsertStatus.CONFLICT]
    assert (await job(hipq, "a")).data == {"x": 1}

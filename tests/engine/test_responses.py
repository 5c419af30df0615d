"""Responses: early, duplicate, stale, late and unknown ones (docs/http-api.md)."""

from __future__ import annotations

import pytest

from hipq.bodies import ResponseRequest
from hipq.config import ResponsesConfig
from hipq.engine import Reconciler
from hipq.errors import StaleResponse
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Targets
from hipq.testing import FakeClock, MemoryTarget, succeed
from tests.engine._helpers import enqueue, history, inbox_outcomes, job, queue, respond, tick

RETRY_AT_ONCE = {"strategy": "fixed", "delay_seconds": 0}
SWEEP_WAIT = 2  # the sweep leaves responses younger than a second alone


@pytest.fixture(autouse=True)
async def _queue(hipq: Hipq) -> None:
    await hipq.create_queue(queue(retry=RETRY_AT_ONCE, timeout_seconds=60))


async def test_an_immediate_outcome_from_the_target_is_applied(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    reconciler = Reconciler(store, clock=clock, owner="o1",
                            targets=Targets(memory={"t": MemoryTarget(succeed)}))
    await enqueue(hipq, "a")
    await tick(reconciler)

    assert (await tick(reconciler)).finished == 1
    assert (await job(hipq, "a")).result == {"echo": "a"}


@pytest.mark.sql_only  # reads the inbox's rows (inbox_outcomes)
async def test_a_response_before_the_launch_is_kept_and_applied(
        hipq: Hipq, reconciler: Reconciler, store: Store, clock: FakeClock) -> None:
    await enqueue(hipq, "a", correlation_key="order-1")
    await hipq.report_response("order-1", ResponseRequest(result="early"))
    clock.advance(SWEEP_WAIT)

    await tick(reconciler)  # launched; the response waited in the inbox
    assert list((await inbox_outcomes(store)).values()) == [None]
    assert (await tick(reconciler)).finished == 1

    stored = await job(hipq, "a")
    assert (stored.status, stored.result) == (JobState.SUCCEEDED, "early")


@pytest.mark.sql_only  # reads the inbox's rows (inbox_outcomes)
async def test_duplicate_responses_are_applied_once(
        hipq: Hipq, reconciler: Reconciler, store: Store) -> None:
    await enqueue(hipq, "a")
    await tick(reconciler)
    await respond(hipq, "a", result=1)
    await respond(hipq, "a", status="failed")

    result = await tick(reconciler)

    assert (result.responses_applied, result.finished, result.retried) == (1, 1, 0)
    assert (await job(hipq, "a")).result == 1
    assert list((await inbox_outcomes(store)).values()) == ["applied", "duplicate"]
    assert [t.outcome for t in await history(hipq, "a")] == ["succeeded"]


@pytest.mark.sql_only  # reads the inbox's rows (inbox_outcomes)
async def test_a_repeated_delivery_key_is_stored_once(
        hipq: Hipq, reconciler: Reconciler, store: Store) -> None:
    await enqueue(hipq, "a")
    await tick(reconciler)
    key = (await job(hipq, "a")).correlation_key
    assert key is not None

    first = await hipq.report_response(key, ResponseRequest(), dedup_key="kafka:0:17")
    again = await hipq.report_response(key, ResponseRequest(), dedup_key="kafka:0:17")

    assert first is not None
    assert again is None
    assert len(await inbox_outcomes(store)) == 1


async def test_a_status_callback_for_an_older_attempt_is_stale(
        hipq: Hipq, reconciler: Reconciler) -> None:
    await enqueue(hipq, "a")
    await tick(reconciler)
    await hipq.report_status("q", "a", ResponseRequest(status="failed", attempt=1))
    await tick(reconciler)
    await tick(reconciler)  # attempt 2 is running

    with pytest.raises(StaleResponse):
        await hipq.report_status("q", "a", ResponseRequest(attempt=1))
    await hipq.report_status("q", "a", ResponseRequest(attempt=2))
    await tick(reconciler)
    assert (await job(hipq, "a")).status is JobState.SUCCEEDED


@pytest.mark.sql_only  # reads the inbox's rows (inbox_outcomes)
async def test_a_response_for_an_older_attempt_of_a_fixed_key_is_stale(
        hipq: Hipq, reconciler: Reconciler, store: Store) -> None:
    await enqueue(hipq, "a", correlation_key="order-1")
    await tick(reconciler)
    await hipq.report_response("order-1", ResponseRequest(status="failed", attempt=1))
    await tick(reconciler)
    await tick(reconciler)  # attempt 2 is running, under the same key

    await hipq.report_response("order-1", ResponseRequest(attempt=1))
    result = await tick(reconciler)

    assert result.responses_applied == 0
    assert (await job(hipq, "a")).status is JobState.RUNNING
    assert list((await inbox_outcomes(store)).values())[-1] == "stale"


@pytest.mark.sql_only  # reads the inbox's rows (inbox_outcomes)
async def test_a_late_response_is_recorded_on_the_history_not_applied(
        hipq: Hipq, reconciler: Reconciler, store: Store, clock: FakeClock) -> None:
    await enqueue(hipq, "a")
    await tick(reconciler)
    first_key = (await job(hipq, "a")).correlation_key
    assert first_key is not None
    clock.advance(60)
    await tick(reconciler)  # timed out, retried
    await tick(reconciler)  # attempt 2 is running

    await hipq.report_response(first_key, ResponseRequest(result="too late"))
    clock.advance(SWEEP_WAIT)
    result = await tick(reconciler)

    assert result.responses_applied == 0
    stored = await job(hipq, "a")
    assert (stored.status, stored.attempt) == (JobState.RUNNING, 2)
    tries = await history(hipq, "a")
    assert [t.outcome for t in tries] == ["timeout", "late_response"]
    assert tries[-1].response == {"status": "succeeded", "result": "too late"}
    assert list((await inbox_outcomes(store)).values()) == ["late"]


async def test_a_late_response_after_the_job_failed_is_recorded(
        hipq: Hipq, store: Store, clock: FakeClock, reconciler: Reconciler) -> None:
    await hipq.create_queue(queue("once", attempts=1, timeout_seconds=10))
    await enqueue(hipq, "a", queue_id="once")
    await tick(reconciler)
    key = (await job(hipq, "a", "once")).correlation_key
    assert key is not None
    clock.advance(10)
    await tick(reconciler)
    assert (await job(hipq, "a", "once")).status is JobState.FAILED

    await hipq.report_response(key, ResponseRequest())
    clock.advance(SWEEP_WAIT)
    await tick(reconciler)

    assert (await job(hipq, "a", "once")).status is JobState.FAILED
    assert [t.outcome for t in await history(hipq, "a", "once")] == ["timeout", "late_response"]


@pytest.mark.sql_only  # reads the inbox's rows (inbox_outcomes)
async def test_an_unknown_key_waits_its_buffer_then_is_unmatched(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = Reconciler(store, clock=clock, owner="o1", targets=Targets(memory={"t": target}),
                            responses=ResponsesConfig(buffer_seconds=60))
    row = await hipq.report_response("nobody", ResponseRequest())
    assert row is not None

    clock.advance(59)
    await tick(reconciler)
    assert (await inbox_outcomes(store))[row] is None

    clock.advance(2)
    await tick(reconciler)
    assert (await inbox_outcomes(store))[row] == "unmatched"


@pytest.mark.sql_only  # reads the inbox's rows (inbox_outcomes)
async def test_a_late_response_to_a_fixed_key_without_attempt_is_not_applied_to_the_retry(
        hipq: Hipq, reconciler: Reconciler, store: Store, clock: FakeClock) -> None:
    await enqueue(hipq, "a", correlation_key="order-7")
    await tick(reconciler)
    clock.advance(60)
    await tick(reconciler)  # attempt 1 timed out and is re-queued
    await hipq.report_response("order-7", ResponseRequest(result="for attempt 1"))
    clock.advance(1)
    await tick(reconciler)  # attempt 2 is launched after the reply arrived

    result = await tick(reconciler)

    assert result.responses_applied == 0
    stored = await job(hipq, "a")
    assert (stored.status, stored.attempt) == (JobState.RUNNING, 2)
    tries = await history(hipq, "a")
    assert [t.outcome for t in tries] == ["timeout", "late_response"]
    assert tries[-1].attempt == 1
    assert list((await inbox_outcomes(store)).values()) == ["late"]

"""What a plugin or a Python target hands back that no store can hold (an
error in a plugin is caught, logged and counted: docs/configuration.md, "Plugins"). Before, such an
answer reached step 3's one transaction or a throttler's writes, which then failed at every tick:
every job of the daemon, in every queue, stayed where it was. Now the answer is
the plugin's error alone, and the other jobs end."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest

from hipq.config import ReconcileConfig
from hipq.engine import Reconciler
from hipq.jobs import Job, JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Completed, LaunchOutcome, Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, job, queue, tick

UTC = datetime.UTC
UNSTORABLE: dict[str, Any] = {
    "set": {1, 2}, "bytes": b"x", "datetime": datetime.datetime(2026, 1, 1),
    "uuid": uuid.uuid4(), "nan": float("nan"), "nul": "a\x00b", "big": 2**70,
    "key": {(1, 2): "a"},
}


class InProcess(MemoryTarget):
    """Runs in its tick, as a Python target with ``in_tick: true``."""

    in_tick = True


def reconciler_for(store: Store, clock: FakeClock, target: MemoryTarget) -> Reconciler:
    return Reconciler(store, clock=clock, owner="o1", targets=Targets(memory={"t": target}),
                      config=ReconcileConfig())


async def ticks(reconciler: Reconciler, clock: FakeClock, n: int = 3) -> None:
    """``n`` ticks a second apart; none may raise."""
    for _ in range(n):
        await tick(reconciler)
        clock.advance(1)


async def three_jobs(hipq: Hipq, queue_id: str = "q") -> None:
    for job_id in ("a", "odd", "b"):
        await enqueue(hipq, job_id, queue_id)


@pytest.mark.parametrize("in_tick", [False, True], ids=["claim-first", "in-tick"])
@pytest.mark.parametrize("where", ["result", "error"])
@pytest.mark.parametrize("kind", sorted(UNSTORABLE))
async def test_an_answer_no_store_holds_fails_its_try_alone(
        hipq: Hipq, store: Store, clock: FakeClock, kind: str, where: str,
        in_tick: bool) -> None:
    def run(j: Job) -> LaunchOutcome:
        if j.id != "odd":
            return Completed(status="succeeded", result={"ok": j.id})
        if where == "result":
            return Completed(status="succeeded", result={"v": UNSTORABLE[kind]})
        return Completed(status="failed", error={"v": UNSTORABLE[kind]}, retryable=True)

    reconciler = reconciler_for(store, clock, (InProcess if in_tick else MemoryTarget)(run))
    await hipq.create_queue(queue())
    await three_jobs(hipq)
    await ticks(reconciler, clock)
    assert (await job(hipq, "a")).result == {"ok": "a"}
    assert (await job(hipq, "b")).status is JobState.SUCCEEDED
    odd = await job(hipq, "odd")
    assert odd.status is JobState.FAILED  # at once: running it again gives the same
    assert odd.attempt == 1
    assert odd.error is not None
    assert odd.error["kind"] == "plugin"
    assert odd.error["detail"].startswith("the target's answer cannot be stored: ")
    assert odd.result is None


@pytest.mark.parametrize("odd", ["text", "uuid_data", "list_data", "nan_data", "reason_int",
                                 "reason_nul", "not_a_decision"])
async def test_a_retry_decision_no_store_holds_is_the_strategys_error(
        hipq: Hipq, store: Store, clock: FakeClock, odd: str) -> None:
    """As a strategy that raised: logged, and the job retried by exponential
    backoff with its data unchanged."""
    def run(j: Job) -> LaunchOutcome:
        if j.id == "odd":
            return Completed(status="failed", error={"detail": "no"}, retryable=True)
        return Completed(status="succeeded", result={"ok": j.id})

    reconciler = reconciler_for(store, clock, MemoryTarget(run))
    await hipq.create_queue(queue(retry={"plugin": "tests.engine._plugins:MalformedRetry",
                                         "options": {"odd": odd}}))
    await enqueue(hipq, "a")
    await enqueue(hipq, "odd", data={"keep": 1})
    await enqueue(hipq, "b")
    started = clock.now()
    await ticks(reconciler, clock, 2)
    for done in ("a", "b"):
        assert (await job(hipq, done)).status is JobState.SUCCEEDED
    retried = await job(hipq, "odd")
    assert retried.status is JobState.QUEUED
    assert retried.attempt == 1
    assert retried.data == {"keep": 1}
    assert started < retried.run_at < started + datetime.timedelta(minutes=5)


async def test_a_naive_retry_time_is_taken_as_utc(hipq: Hipq, store: Store,
                                                  clock: FakeClock) -> None:
    reconciler = reconciler_for(store, clock, MemoryTarget(
        lambda j: Completed(status="failed", error={"detail": "no"}, retryable=True)))
    await hipq.create_queue(queue(retry={"plugin": "tests.engine._plugins:MalformedRetry",
                                         "options": {"odd": "naive"}}))
    await enqueue(hipq, "odd")
    await ticks(reconciler, clock, 2)
    assert (await job(hipq, "odd")).run_at == datetime.datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("odd", ["text", "drop_set", "drop_nul", "launch_ids", "launch_none",
                                 "reschedule_none", "held_number"])
async def test_a_throttler_decision_no_store_holds_launches_nothing_of_its_queue(
        hipq: Hipq, store: Store, clock: FakeClock, odd: str) -> None:
    """As a throttler that raised: its queue launches nothing that tick (the error
    counted); the other queues go on."""
    reconciler = reconciler_for(store, clock, MemoryTarget(
        lambda j: Completed(status="succeeded", result={"ok": j.id})))
    await hipq.create_queue(queue(throttler={
        "plugin": "tests.engine._plugins:MalformedThrottler", "options": {"odd": odd}}))
    await hipq.create_queue(queue("other"))
    await three_jobs(hipq)
    await enqueue(hipq, "c", "other")
    result = await tick(reconciler)
    assert result.throttler_errors == 1
    await ticks(reconciler, clock, 2)
    assert (await job(hipq, "c", "other")).status is JobState.SUCCEEDED
    for waiting in ("a", "odd", "b"):
        assert (await job(hipq, waiting)).status is JobState.QUEUED


@pytest.mark.parametrize("odd", ["naive", "generator"])
async def test_what_a_throttler_may_hand_back(hipq: Hipq, store: Store, clock: FakeClock,
                                              odd: str) -> None:
    """A naive time is taken as UTC; ``launch`` may be any iterable of candidates."""
    reconciler = reconciler_for(store, clock, MemoryTarget(
        lambda j: Completed(status="succeeded", result={"ok": j.id})))
    await hipq.create_queue(queue(throttler={
        "plugin": "tests.engine._plugins:MalformedThrottler", "options": {"odd": odd}}))
    await three_jobs(hipq)
    await ticks(reconciler, clock)
    for done in ("a", "b"):
        assert (await job(hipq, done)).status is JobState.SUCCEEDED
    if odd == "naive":
        assert (await job(hipq, "odd")).run_at == datetime.datetime(2030, 1, 1, tzinfo=UTC)

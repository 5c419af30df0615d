"""Retry strategies and the rules every strategy runs under (docs/configuration.md, "Plugins")."""

from __future__ import annotations

from typing import Any

from hipq.engine import Reconciler
from hipq.jobs import Job, JobState
from hipq.service import Hipq
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, history, job, queue, respond, tick


class Retrying:
    """Drives one job "a" through failed tries and records each retry delay."""

    def __init__(self, hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
        self.hipq, self.reconciler, self.clock = hipq, reconciler, clock

    async def start(self, **settings: Any) -> None:
        await self.hipq.create_queue(queue(**settings))
        await enqueue(self.hipq, "a", data={"x": 1})
        await tick(self.reconciler)

    async def fail(self, **response: Any) -> Job:
        """Fail the running try; the job as stored after the next tick."""
        await respond(self.hipq, "a", status="failed", **response)
        await tick(self.reconciler)
        return await job(self.hipq, "a")

    async def delays(self, tries: int, **response: Any) -> list[float]:
        """Fail ``tries`` tries in a row, relaunching each retry when it is due."""
        out = []
        for _ in range(tries):
            failed_at = self.clock.now()
            stored = await self.fail(**response)
            assert stored.status is JobState.QUEUED
            out.append((stored.run_at - failed_at).total_seconds())
            self.clock.set(stored.run_at)
            assert (await tick(self.reconciler)).launched == 1
        return out


async def _retrying(hipq: Hipq, reconciler: Reconciler, clock: FakeClock,
                    **settings: Any) -> Retrying:
    run = Retrying(hipq, reconciler, clock)
    await run.start(**settings)
    return run


async def test_exponential_without_jitter_is_exact_and_capped(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    run = await _retrying(hipq, reconciler, clock, attempts=5, retry={
        "strategy": "exponential", "base_seconds": 2, "factor": 3, "max_seconds": 20,
        "jitter": False})

    assert await run.delays(4) == [2, 6, 18, 20]


async def test_exponential_with_jitter_stays_under_the_curve(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    run = await _retrying(hipq, reconciler, clock, attempts=6, retry={
        "strategy": "exponential", "base_seconds": 4, "factor": 2, "max_seconds": 40})

    delays = await run.delays(5)

    ceilings = [4, 8, 16, 32, 40]
    assert all(0 <= d <= c for d, c in zip(delays, ceilings, strict=True)), delays
    assert delays != ceilings


async def test_fixed_delay(hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    run = await _retrying(hipq, reconciler, clock, attempts=4,
                          retry={"strategy": "fixed", "delay_seconds": 7})

    assert await run.delays(3) == [7, 7, 7]


async def test_lowkiq_curve(hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    run = await _retrying(hipq, reconciler, clock, attempts=4, retry={"strategy": "lowkiq"})

    delays = await run.delays(3)

    for count, delay in enumerate(delays):  # count**4 + 15 + rand(30) * (count + 1)
        base = count**4 + 15
        assert base <= delay <= base + 29 * (count + 1), (count, delay)
        assert (delay - base) % (count + 1) == 0


async def test_none_fails_at_once(hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    run = await _retrying(hipq, reconciler, clock, attempts=5, retry={"strategy": "none"})

    stored = await run.fail()

    assert (stored.status, stored.attempt) == (JobState.FAILED, 1)
    assert stored.error is not None
    assert stored.error["gave_up"] == "retry strategy 'none'"


async def test_max_attempts_bounds_every_strategy(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    run = await _retrying(hipq, reconciler, clock, attempts=2,
                          retry={"strategy": "fixed", "delay_seconds": 0})

    assert await run.delays(1) == [0]
    stored = await run.fail()

    assert (stored.status, stored.attempt) == (JobState.FAILED, 2)
    assert stored.error is not None
    assert "max attempts (2)" in stored.error["gave_up"]


async def test_a_not_retryable_response_fails_at_once(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    run = await _retrying(hipq, reconciler, clock, attempts=5)

    stored = await run.fail(retryable=False, error={"detail": "bad request"})

    assert (stored.status, stored.attempt) == (JobState.FAILED, 1)
    assert stored.error is not None
    assert stored.error["retryable"] is False


async def test_at_most_once_never_retries_a_timeout(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    await _retrying(hipq, reconciler, clock, attempts=5, delivery_strategy="at_most_once",
                    timeout_seconds=10)

    clock.advance(10)
    result = await tick(reconciler)

    assert (result.timed_out, result.retried, result.finished) == (1, 0, 1)
    stored = await job(hipq, "a")
    assert stored.status is JobState.FAILED
    assert stored.error is not None
    assert stored.error["kind"] == "timeout"


async def test_at_most_once_still_retries_a_reported_failure(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    run = await _retrying(hipq, reconciler, clock, attempts=5, delivery_strategy="at_most_once")

    assert (await run.fail()).status is JobState.QUEUED


async def test_step_backoff_plugin(hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    run = await _retrying(hipq, reconciler, clock, attempts=5, retry={
        "plugin": "hipq.contrib.retries:StepBackoff", "options": {"steps": [5, 30]}})

    assert await run.delays(2) == [5, 30]
    stored = await run.fail()

    assert stored.status is JobState.FAILED
    assert stored.error is not None
    assert stored.error["gave_up"] == "no step after 2 tries"


async def test_step_backoff_gives_up_on_410(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    run = await _retrying(hipq, reconciler, clock, attempts=5,
                          retry={"plugin": "hipq.contrib.retries:StepBackoff"})

    stored = await run.fail(error={"kind": "http_status", "detail": "410"})

    assert stored.status is JobState.FAILED
    assert stored.error is not None
    assert stored.error["gave_up"] == "gone"


async def test_retry_with_new_data_is_persisted(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, target: MemoryTarget) -> None:
    run = await _retrying(hipq, reconciler, clock, attempts=3, timeout_seconds=60,
                          retry={"plugin": "hipq.contrib.retries:retry_with_note"})

    assert await run.delays(1) == [10]
    clock.advance(60)  # the second try times out
    await tick(reconciler)

    noted = {"x": 1, "failures": ["response_failed", "timeout"]}
    assert (await job(hipq, "a")).data == noted
    first, second = target.launched
    assert (first.data, second.data) == ({"x": 1}, {"x": 1, "failures": ["response_failed"]})
    assert [t.outcome for t in await history(hipq, "a")] == ["response_failed", "timeout"]


async def test_a_raising_retry_plugin_falls_back_to_exponential(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    run = await _retrying(hipq, reconciler, clock, attempts=3,
                          retry={"plugin": "tests.engine._plugins:RaisingRetry"})

    failed_at = clock.now()
    stored = await run.fail()

    assert stored.status is JobState.QUEUED
    assert 0 <= (stored.run_at - failed_at).total_seconds() <= 1  # base 1 s, first retry

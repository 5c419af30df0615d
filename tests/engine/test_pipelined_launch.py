"""A pipelined target (one with ``dispatch``, like the Kafka target): the launcher hands
jobs over without waiting for their answers and records each when it comes."""

from __future__ import annotations

import asyncio

from hipq.engine import Reconciler
from hipq.errors import TransientLaunchError
from hipq.jobs import Job, JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import ACCEPTED, LaunchOutcome, Targets
from hipq.testing import FakeClock
from tests.engine._helpers import enqueue, history, job, queue, tick

RETRY_LATER = {"strategy": "fixed", "delay_seconds": 60}


class Pipelined:
    """Hands jobs over at once; the test answers each future when it likes."""

    def __init__(self) -> None:
        self.sent: dict[str, asyncio.Future[None]] = {}

    async def dispatch(self, job: Job) -> asyncio.Future[None]:
        acked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sent[job.id] = acked
        return acked

    async def launch(self, job: Job) -> LaunchOutcome:
        await (await self.dispatch(job))
        return ACCEPTED

    async def close(self) -> None:
        return None


async def _confirmed(hipq: Hipq, job_id: str) -> bool:
    return (await job(hipq, job_id)).launch_confirmed


async def test_jobs_are_handed_over_without_waiting_and_confirmed_on_their_answers(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    target = Pipelined()
    reconciler = Reconciler(store, clock=clock, owner="o1",
                            targets=Targets(memory={"t": target}))
    await hipq.create_queue(queue(retry=RETRY_LATER))
    for job_id in ("a", "b", "c"):
        await enqueue(hipq, job_id)

    await reconciler.run_once()
    for _ in range(20):  # the workers hand all three over, none waits for an answer
        await asyncio.sleep(0)
    assert sorted(target.sent) == ["a", "b", "c"]
    assert not any([await _confirmed(hipq, j) for j in "abc"])

    target.sent["a"].set_result(None)
    target.sent["b"].set_exception(TransientLaunchError("no ack", kind="timeout"))
    target.sent["c"].set_result(None)
    await reconciler.drain()
    assert await _confirmed(hipq, "a")
    assert await _confirmed(hipq, "c")

    await tick(reconciler)  # the failed hand-over is a failed try, retried later
    failed = await job(hipq, "b")
    assert (failed.status, failed.attempt) == (JobState.QUEUED, 1)
    assert [(a.outcome, (a.error or {}).get("kind")) for a in await history(hipq, "b")] == [
        ("timeout", "timeout")]
    assert (await job(hipq, "a")).status is JobState.RUNNING


async def test_drain_waits_for_answers_still_in_flight(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    target = Pipelined()
    reconciler = Reconciler(store, clock=clock, owner="o1",
                            targets=Targets(memory={"t": target}))
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    await reconciler.run_once()
    for _ in range(20):
        await asyncio.sleep(0)
    assert "a" in target.sent

    draining = asyncio.create_task(reconciler.drain())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not draining.done()
    target.sent["a"].set_result(None)
    await asyncio.wait_for(draining, 5)
    assert await _confirmed(hipq, "a")

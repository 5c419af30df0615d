"""Capacity is never exceeded, with mixed weights and critical jobs (docs/throttling.md), and
nothing is launched twice or lost, whatever responses and clock moves happen."""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipq.bodies import EnqueueRequest, ResponseRequest
from hipq.engine import Reconciler
from hipq.jobs import Job
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import hot_jobs, queue, tick

_queue_numbers = itertools.count()

ACTIONS = st.sampled_from(["wait", "wait", "succeed", "fail"])
ONE_IN_FOUR = st.sampled_from([True, False, False, False])


@st.composite
def job_specs(draw: st.DrawFn) -> EnqueueRequest:
    return EnqueueRequest(
        weight=draw(st.integers(1, 3)), critical=draw(ONE_IN_FOUR),
        priority=draw(st.integers(0, 3)), data={"n": draw(st.integers(0, 9))})


def _weights(jobs: list[Job], *, critical: bool) -> int:
    return sum(j.weight for j in jobs if j.critical is critical)


class Run:
    """One example: a fresh queue, target and reconciler on the shared database."""

    def __init__(self, store: Store, clock: FakeClock, data: st.DataObject) -> None:
        self.store, self.clock, self.data = store, clock, data
        self.hipq = Hipq(store, clock=clock)
        self.target = MemoryTarget()
        self.reconciler = Reconciler(store, clock=clock, owner="o1",
                                     targets=Targets(memory={"t": self.target}))
        self.queue = f"cap{next(_queue_numbers)}"
        self.ids: list[str] = []
        self.concurrency = data.draw(st.integers(3, 6), label="concurrency")
        self.critical = data.draw(st.none() | st.integers(3, 4), label="critical_concurrency")

    async def setup(self) -> None:
        await self.hipq.create_queue(queue(
            self.queue, concurrency=self.concurrency, critical_concurrency=self.critical,
            attempts=self.data.draw(st.integers(1, 3), label="attempts"), timeout_seconds=20,
            retry={"strategy": "fixed",
                   "delay_seconds": self.data.draw(st.integers(0, 3), label="delay")}))
        await self.enqueue(self.data.draw(st.lists(job_specs(), min_size=1, max_size=12)))

    async def enqueue(self, specs: list[EnqueueRequest]) -> None:
        items = [(f"j{len(self.ids) + i}", spec) for i, spec in enumerate(specs)]
        await self.hipq.enqueue_many(self.queue, items)
        self.ids.extend(job_id for job_id, _ in items)

    async def running(self) -> list[Job]:
        """In a stable order: each draw must go to the same job when an example replays."""
        return sorted(await self.store.job_load_running(queue=self.queue), key=lambda j: j.id)

    async def step(self, responses: list[str] | None = None, advance: float | None = None) -> None:
        for running in await self.running():
            action = responses.pop() if responses else self.data.draw(ACTIONS)
            if action != "wait" and running.correlation_key:
                status = "succeeded" if action == "succeed" else "failed"
                await self.hipq.report_response(running.correlation_key,
                                                ResponseRequest(status=status))
        if responses is None and self.data.draw(ONE_IN_FOUR):
            await self.enqueue(self.data.draw(st.lists(job_specs(), max_size=3)))
        self.clock.advance(self.data.draw(st.integers(0, 10)) if advance is None else advance)
        await tick(self.reconciler)
        await self.check_capacity()

    async def check_capacity(self) -> None:
        running = await self.running()
        assert _weights(running, critical=False) <= self.concurrency
        critical_capacity = self.concurrency if self.critical is None else self.critical
        assert _weights(running, critical=True) <= critical_capacity

    async def finish(self) -> None:
        """Answer every running job with success until nothing is left."""
        for _ in range(60):
            if not await hot_jobs(self.store, self.queue):
                break
            await self.step(responses=["succeed"] * 50, advance=5)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
async def test_capacity_holds_and_no_job_is_launched_twice_or_lost(
        store: Store, clock: FakeClock, data: st.DataObject) -> None:
    run = Run(store, clock, data)
    try:
        await run.setup()
        for _ in range(data.draw(st.integers(1, 15), label="ticks")):
            await run.step()
        await run.finish()
    finally:  # examples share the database: keep this queue out of later ones
        await run.hipq.set_paused(run.queue, True)

    assert {j.queue for j in run.target.launched} <= {run.queue}
    tries = Counter((j.id, j.attempt) for j in run.target.launched)
    assert [pair for pair, n in tries.items() if n > 1] == []
    assert await hot_jobs(store, run.queue) == []
    for job_id in run.ids:
        stored = await store.job_get(run.queue, job_id)
        assert stored is not None
        assert stored.status.terminal, stored

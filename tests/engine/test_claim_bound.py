"""A queue without a concurrency limit claims no more jobs than its target can
have in flight (``max_in_flight``): no deadline starts for a job not yet sent."""

from __future__ import annotations

import asyncio

from hipq.engine import Reconciler
from hipq.jobs import Job
from hipq.schemas import EnqueueRequest
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import ACCEPTED, LaunchOutcome, Targets
from hipq.testing import FakeClock
from tests.engine._helpers import queue


class SlowTarget:
    """Answers a launch only when told to."""

    max_in_flight = 3

    def __init__(self) -> None:
        self.sent: list[Job] = []
        self.release = asyncio.Event()

    async def launch(self, job: Job) -> LaunchOutcome:
        self.sent.append(job)
        await self.release.wait()
        return ACCEPTED

    async def close(self) -> None:
        return None


async def test_claims_wait_for_free_launch_slots(store: Store, clock: FakeClock) -> None:
    target = SlowTarget()
    hipq = Hipq(store, clock=clock)
    await hipq.create_queue(queue())
    await hipq.enqueue_many("q", [(f"j{i}", EnqueueRequest()) for i in range(10)])
    woken: list[int] = []
    reconciler = Reconciler(store, clock=clock, owner="o1", on_wake=lambda: woken.append(1),
                            targets=Targets(memory={"t": target}))
    assert (await reconciler.run_once()).launched == 3
    assert (await reconciler.run_once()).launched == 0  # the three are still being sent
    target.release.set()
    await reconciler.drain()
    assert woken  # a freed slot wakes the loop
    assert (await reconciler.run_once()).launched == 3
    await reconciler.drain()
    launched = 6
    while launched < 10:
        launched += (await reconciler.run_once()).launched
        await reconciler.drain()
    assert len(target.sent) == 10

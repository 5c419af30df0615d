"""Step 3 never writes beside a write of launch confirmations (issue 28).

A confirmation is written in the background when the target acknowledges a launch;
with a fast downstream, the response of one launch is applied while the confirmations
of others are still being written. On PostgreSQL a statement that finds its row
changed by another transaction meanwhile leaves it alone, so an archive written beside
a confirmation of the same row used to skip it: the try left the batch, still
``running`` in the database, and was never finished. The reconciler now holds the
launcher's ``confirming`` lock while it persists."""

from __future__ import annotations

import asyncio
from typing import Any

from hipq.engine import Reconciler
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Targets
from hipq.testing import FakeClock
from tests.engine._helpers import enqueue, job, queue, respond
from tests.engine.test_pipelined_launch import Pipelined


async def test_the_persist_waits_for_the_confirmations_being_written(
        hipq: Hipq, store: Store, clock: FakeClock, monkeypatch: Any) -> None:
    target = Pipelined()
    reconciler = Reconciler(store, clock=clock, owner="o1",
                            targets=Targets(memory={"t": target}))
    await hipq.create_queue(queue())
    for job_id in ("a", "b"):
        await enqueue(hipq, job_id)
    await reconciler.run_once()
    for _ in range(20):
        await asyncio.sleep(0)
    target.sent["b"].set_result(None)
    for _ in range(20):
        await asyncio.sleep(0)
    await reconciler.launcher.flush()  # b is confirmed (a is not answered yet)
    assert (await job(hipq, "b")).launch_confirmed
    await respond(hipq, "b", result=1)

    events: list[str] = []
    gate = asyncio.Event()
    confirm, persist = store.job_confirm_launch_many, store.persist_batch

    async def slow_confirm(**kwargs: Any) -> Any:
        events.append("confirm starts")
        await gate.wait()
        try:
            return await confirm(**kwargs)
        finally:
            events.append("confirm ends")

    async def watched_persist(**kwargs: Any) -> Any:
        events.append("persist starts")
        return await persist(**kwargs)

    monkeypatch.setattr(store, "job_confirm_launch_many", slow_confirm)
    monkeypatch.setattr(store, "persist_batch", watched_persist)
    target.sent["a"].set_result(None)  # a's confirmation is being written...
    for _ in range(20):
        await asyncio.sleep(0)
    assert events == ["confirm starts"]

    ticking = asyncio.ensure_future(reconciler.run_once())  # ...when b's response applies
    for _ in range(50):
        await asyncio.sleep(0)
    assert events == ["confirm starts"], "step 3 wrote beside a confirmation"
    gate.set()
    await ticking
    assert events == ["confirm starts", "confirm ends", "persist starts"]
    assert (await job(hipq, "b")).status is JobState.SUCCEEDED
    a = await job(hipq, "a")
    assert (a.status, a.launch_confirmed) == (JobState.RUNNING, True)
    await reconciler.drain()

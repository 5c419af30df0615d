"""Launch slots are per target (``reconcile.launch_concurrency`` each): a target
whose sends hang holds its own slots only. They were shared by every target, so a
Python function that never returned (or a downstream answering at its timeout) took
the slots one try after another, and no queue of the daemon launched again: its
jobs were claimed, never sent, and timed out (nobody blocks another job's
launch)."""

from __future__ import annotations

import asyncio
import threading

from hipq.config import QueueConfig, ReconcileConfig
from hipq.engine import Reconciler
from hipq.jobs import ErrorKind, Job, JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Completed, LaunchOutcome, Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, job, queue


async def settle() -> None:
    for _ in range(20):  # the launch workers and their recording (no event to wait on)
        await asyncio.sleep(0)


async def test_a_target_that_hangs_blocks_no_other_target(hipq: Hipq, store: Store,
                                                          clock: FakeClock) -> None:
    started: list[str] = []

    async def hang(j: Job) -> LaunchOutcome:
        started.append(j.id)
        await asyncio.Event().wait()  # never returns
        raise AssertionError

    fast = MemoryTarget(lambda j: Completed(status="succeeded", result={"ok": j.id}))
    reconciler = Reconciler(store, clock=clock, owner="o1",
                            targets=Targets(memory={"hangs": MemoryTarget(hang), "t": fast}),
                            config=ReconcileConfig(launch_concurrency=2))
    await hipq.create_queue(QueueConfig(id="hangs", target={"kind": "memory", "name": "hangs"},
                                        timeout_seconds=1))
    await hipq.create_queue(queue())
    for i in range(4):
        await enqueue(hipq, f"h{i}", "hangs")
    await reconciler.run_once()
    await settle()
    assert started == ["h0", "h1"]  # its two slots, in order; h2 and h3 wait for them
    for i in range(3):
        await enqueue(hipq, f"f{i}")
        await reconciler.run_once()
        await settle()
        clock.advance(2)  # past the hung tries' deadlines
    await reconciler.run_once()
    assert fast.ids() == ["f0", "f1", "f2"]
    for i in range(3):
        assert (await job(hipq, f"f{i}")).status is JobState.SUCCEEDED
    assert started == ["h0", "h1"]  # the hung target never had more than its slots
    _, tries = await hipq.get_job("hangs", "h0")
    assert tries[0].error is not None
    assert tries[0].error["kind"] == ErrorKind.TIMEOUT  # its tries time out as any


RELEASE = threading.Event()


def blocks(job: Job) -> dict[str, str]:
    """A plain function that waits for the test (as a call without a timeout would)."""
    RELEASE.wait(30)
    return {"ok": job.id}


def answers(job: Job) -> dict[str, str]:
    return {"ok": job.id}


async def test_plain_functions_that_hang_keep_their_own_threads(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    """Plain functions run in their target's own threads: more hung calls than a
    shared pool holds (asyncio.to_thread's: at most 32, 6 on 2 cores) leave another
    queue's plain function its threads."""
    reconciler = Reconciler(store, clock=clock, owner="o1", targets=Targets(),
                            config=ReconcileConfig())
    for queue_id, function in (("hangs", "blocks"), ("q", "answers")):
        await hipq.create_queue(QueueConfig(id=queue_id, target={
            "kind": "python", "function": f"tests.engine.test_launch_slots:{function}"}))
    RELEASE.clear()
    try:
        for i in range(40):
            await enqueue(hipq, f"h{i}", "hangs")
        await reconciler.run_once()
        await enqueue(hipq, "f")
        await reconciler.run_once()
        for _ in range(200):
            await reconciler.run_once()
            if (await job(hipq, "f")).status is JobState.SUCCEEDED:
                break
            await asyncio.sleep(0.01)  # the function's thread (no event to wait on)
        assert (await job(hipq, "f")).result == {"ok": "f"}
        assert (await job(hipq, "h0", "hangs")).status is JobState.RUNNING
    finally:
        RELEASE.set()
    await reconciler.drain()

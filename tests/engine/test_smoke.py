from __future__ import annotations

from hipq.jobs import JobState
from hipq.reconciler import Reconciler
from hipq.service import Hipq
from hipq.testing import MemoryTarget

from tests.engine._helpers import enqueue, job, queue, respond, tick


async def test_smoke(hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    assert (await tick(reconciler)).launched == 1
    await respond(hipq, "a")
    result = await tick(reconciler)
    assert result.finished == 1
    assert (await job(hipq, "a")).status is JobState.SUCCEEDED
    assert target.ids() == ["a"]

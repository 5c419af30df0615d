"""Small helpers shared by the engine tests."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from hipq.bodies import EnqueueRequest, ResponseRequest
from hipq.config import QueueConfig
from hipq.engine import Reconciler, ReconcileResult
from hipq.jobs import Attempt, Job, Ordering
from hipq.service import Hipq
from hipq.store import InsertOutcome, Store
from hipq.store import schema as s

MEMORY_TARGET: dict[str, Any] = {"kind": "memory", "name": "t"}


def queue(queue_id: str = "q", **settings: Any) -> QueueConfig:
    """A queue that launches into the memory target named ``t``."""
    return QueueConfig(id=queue_id, target=MEMORY_TARGET, **settings)


async def tick(reconciler: Reconciler) -> ReconcileResult:
    """One reconcile pass, with its launches recorded before returning."""
    result = await reconciler.run_once()
    await reconciler.drain()
    return result


async def enqueue(hipq: Hipq, job_id: str, queue_id: str = "q", **fields: Any) -> InsertOutcome:
    return await hipq.enqueue(queue_id, job_id, EnqueueRequest(**fields))


async def job(hipq: Hipq, job_id: str, queue_id: str = "q") -> Job:
    found, _ = await hipq.get_job(queue_id, job_id)
    return found


async def history(hipq: Hipq, job_id: str, queue_id: str = "q") -> list[Attempt]:
    _, attempts = await hipq.get_job(queue_id, job_id)
    return attempts


async def respond(hipq: Hipq, job_id: str, queue_id: str = "q", **fields: Any) -> int | None:
    """Report a response for the job's live try, by its correlation key."""
    key = (await job(hipq, job_id, queue_id)).correlation_key
    assert key is not None, f"job {job_id} has no correlation key (not running?)"
    return await hipq.report_response(key, ResponseRequest(**fields))


async def inbox_outcomes(store: Store) -> dict[int, str | None]:
    """Every inbox row's outcome (None while pending), by row id."""
    t = s.response_inbox
    async with store.engine.connect() as conn:
        rows = await conn.execute(sa.select(t.c.id, t.c.outcome).order_by(t.c.id))
        return {row.id: row.outcome for row in rows}


async def hot_jobs(store: Store, queue_id: str) -> list[Job]:
    """The queue's jobs still in the hot table (queued or running)."""
    queued = await store.job_list_live(queue=queue_id, state="queued",
                                       ordering=Ordering.TIME_THEN_PRIORITY, limit=1_000_000)
    return queued + await store.job_load_running(queue=queue_id)

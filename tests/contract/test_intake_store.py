"""The intake's reads on each database (SPEC 16): pending rows of several queues in
id order, paged by id, each queue read in its own index order; rows of queues
nobody knows, once old enough."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hipq import sql
from hipq.clock import SystemClock
from hipq.store import Store
from hipq.store.memory import MemoryStore
from hipq.testing import FakeClock


async def produce(store: Store, queue: str, jobs: list[dict[str, Any]]) -> None:
    """Rows into the intake as a producer's committed transaction writes them: through
    hipq.sql on a database; the store in memory has its own door for them."""
    if isinstance(store, MemoryStore):
        store.intake_add(queue, jobs, now=SystemClock().now())
        return
    async with store.engine.begin() as conn:  # type: ignore[attr-defined]
        await sql.enqueue_many(conn, queue, jobs)


async def _fill(store: Store) -> None:
    for n in range(4):
        for queue in ("a", "b", "c"):
            await produce(store, queue, [{"id": f"{queue}{n}", "data": {"n": n}}])


async def test_pending_rows_of_several_queues_come_in_id_order_and_page(store: Store) -> None:
    await _fill(store)
    first = await store.intake_pending(queues=["b", "a"], limit=5)
    assert [r.job_id for r in first] == ["a0", "b0", "a1", "b1", "a2"]
    rest = await store.intake_pending(queues=["a", "b"], limit=5, after=first[-1].id)
    assert [r.job_id for r in rest] == ["b2", "a3", "b3"]
    assert await store.intake_pending(queues=[], limit=5) == []


async def test_orphans_are_the_old_rows_of_unknown_queues(store: Store) -> None:
    await _fill(store)
    later = FakeClock().now() + timedelta(days=36500)  # every row is older than this
    orphans = await store.intake_orphans(known=["a", "c"], before=later, limit=10)
    assert [r.job_id for r in orphans] == ["b0", "b1", "b2", "b3"]
    assert await store.intake_orphans(known=["a", "b", "c"], before=later, limit=10) == []
    early = FakeClock().now() - timedelta(days=36500)
    assert await store.intake_orphans(known=["a"], before=early, limit=10) == []

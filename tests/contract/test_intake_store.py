"""The intake's reads on each store (docs/from-your-database.md): pending rows of
several queues in id order, paged by id, each queue read in its own index order and
bounded in bytes; rows of queues nobody knows, once old enough; ids read cut."""

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


async def test_a_read_is_bounded_in_bytes_and_a_row_over_the_limit_comes_unread(
        store: Store) -> None:
    """On every store, whoever wrote the rows (docs/from-your-database.md, "Limits"): a
    read takes the rows that start under its byte budget, a row over ``max_bytes``
    among them without its values (counted for nothing), with why."""
    pad = {"pad": "x" * 2_000}  # about 2,000 bytes of JSON text
    await produce(store, "q", [{"id": "r0", "data": pad},
                               {"id": "big", "data": {"pad": "y" * 9_000}},
                               {"id": "r1", "data": pad}, {"id": "r2", "data": pad},
                               {"id": "r3", "data": pad}])
    rows = await store.intake_pending(queues=["q"], limit=10, max_bytes=5_000, budget=5_000)
    assert [r.job_id for r in rows] == ["r0", "big", "r1", "r2"]  # r2 starts at ~4,000
    big = rows[1]
    assert (big.data, big.fields) == (None, None)
    assert big.problem is not None
    assert "over the limit of 5000 bytes" in big.problem
    assert all(r.problem is None and "x" * 2_000 in r.data for r in (rows[0], *rows[2:]))
    rest = await store.intake_pending(queues=["q"], limit=10, after=rows[-1].id,
                                      max_bytes=5_000, budget=5_000)
    assert [r.job_id for r in rest] == ["r3"]
    whole = await store.intake_pending(queues=["q"], limit=10)  # the default bounds
    assert [r.problem for r in whole] == [None] * 5


async def test_a_long_id_is_read_cut_one_past_the_longest_valid_one(store: Store) -> None:
    await produce(store, "q", [{"id": "x" * 5_000, "data": {}}, {"id": "fine", "data": {}}])
    rows = await store.intake_pending(queues=["q"], limit=10)
    assert [len(r.job_id or "") for r in rows] == [201, 4]
    later = FakeClock().now() + timedelta(days=36500)
    orphans = await store.intake_orphans(known=[], before=later, limit=10)
    assert [(r.queue, len(r.job_id or "")) for r in orphans] == [("q", 201), ("q", 4)]
    assert [r.data for r in orphans] == [None, None]  # rejected without their values

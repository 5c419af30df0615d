"""A launch held back for lack of cost in a partner's bucket (docs/throttling.md,
"Partners") wakes the tick when its own cost fits, not only when one unit does: the
daemon sleeps until the tick's ``wake_at`` when nothing else happens, so a wake-up
missed here leaves the partner's budget idle (bench/partner_cost.py measured about
two thirds of a cost budget used)."""

from __future__ import annotations

from datetime import timedelta

from hipq.service import Hipq
from hipq.store import Store
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, queue, tick
from tests.engine.test_partner_budgets import engine


async def test_a_launch_held_for_its_cost_wakes_the_tick_when_that_cost_fits(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = engine(store, clock, target, limits=[{"cost": 100, "per_seconds": 1}],
                        cost={"estimate": "max_tokens"})
    await hipq.create_queue(queue("summaries", concurrency=100, partner="llm"))
    await enqueue(hipq, "a", "summaries", data={"max_tokens": 60})
    await enqueue(hipq, "b", "summaries", data={"max_tokens": 60})
    launched_at = clock.now()
    result = await tick(reconciler)
    assert result.launched == 1  # 60 of 100 reserved: b's 60 does not fit in the 40 left
    # b fits when a's 60 leaves the window, 1 s after a launched: a tick is due then
    # (the bucket has room for one unit now, which is not b's cost)
    assert result.wake_at is not None
    assert result.wake_at <= launched_at + timedelta(seconds=1)

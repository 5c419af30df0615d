"""Rate limits (docs/throttling.md): at most ``launches`` in any ``per_seconds`` sliding window,
per queue or per group (``by``), held in the database so a restart keeps them."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from hipq.bodies import EnqueueRequest
from hipq.jobs import Job
from hipq.targets import Accepted, LaunchOutcome
from tests.throttling._helpers import Harness


async def test_queue_wide_sliding_window(h: Harness) -> None:
    await h.create(concurrency=10, rate_limit={"launches": 3, "per_seconds": 60})
    await h.enqueue_many([(f"j{i:02d}", EnqueueRequest()) for i in range(10)])
    assert len(await h.tick()) == 3
    await h.finish_running()
    h.clock.advance(20)
    assert await h.tick() == []  # capacity is free, the rate is not
    h.clock.advance(20)
    assert await h.tick() == []
    h.clock.advance(19)
    assert await h.tick() == []  # 59 s after the first three
    h.clock.advance(1)
    assert len(await h.tick()) == 3  # the first three left the window
    h.clock.advance(30)
    await h.finish_running()
    assert await h.tick() == []
    h.clock.advance(30)
    assert len(await h.tick()) == 3
    assert len(h.launched_ids()) == 9


async def test_sliding_not_fixed_window(h: Harness) -> None:
    """2 per 60 s: launches at 0 s and 40 s allow the next at 60 s (one slot) and at
    100 s, never three within 60 s."""
    await h.create(concurrency=10, rate_limit={"launches": 2, "per_seconds": 60})
    await h.enqueue("a")
    assert len(await h.tick()) == 1  # t=0
    h.clock.advance(40)
    await h.enqueue_many([(f"j{i}", EnqueueRequest()) for i in range(5)])
    assert len(await h.tick()) == 1  # t=40: second slot
    h.clock.advance(20)
    assert len(await h.tick()) == 1  # t=60: only a's slot is free again
    h.clock.advance(30)
    assert await h.tick() == []  # t=90: launches at 40 and 60 are inside
    h.clock.advance(10)
    assert len(await h.tick()) == 1  # t=100


async def test_per_group_limit_does_not_hold_back_other_groups(h: Harness) -> None:
    """x's budget is used up by its first two jobs; the y jobs (and those without the
    field, which share one budget) behind the other ten x jobs still go at once."""
    await h.create(concurrency=10, rate_limit={"launches": 2, "per_seconds": 60,
                                               "by": "api"})
    items = [(f"x{i:02d}", EnqueueRequest(data={"api": "x"})) for i in range(12)]
    items += [(f"y{i:02d}", EnqueueRequest(data={"api": "y"})) for i in range(3)]
    items += [(f"z{i:02d}", EnqueueRequest(data={})) for i in range(3)]
    await h.enqueue_many(items)
    launched = sorted(j.id for j in await h.tick())
    assert launched == ["x00", "x01", "y00", "y01", "z00", "z01"]
    await h.finish_running()
    h.clock.advance(30)
    assert await h.tick() == []
    h.clock.advance(30)
    launched = sorted(j.id for j in await h.tick())
    assert launched == ["x02", "x03", "y02", "z02"]


async def test_the_window_survives_a_restart(h: Harness) -> None:
    """A new daemon (new owner, after the old lease expired) sees the launches the
    old one made: the sliding window lives in the database. The old daemon may have
    sent them as late as its end, so they count from the adoption (31 s)."""
    await h.create(concurrency=10, rate_limit={"launches": 2, "per_seconds": 60})
    await h.enqueue_many([(f"j{i}", EnqueueRequest()) for i in range(6)])
    assert len(await h.tick()) == 2
    h.clock.advance(31)  # the first daemon is gone; its 30 s lease has expired
    restarted = Harness(h.store, h.clock, owner="second-daemon")
    restarted.queue_id = h.queue_id
    assert await restarted.tick() == []
    assert {j.owner for j in await restarted.running()} == {"second-daemon"}  # adopted
    h.clock.advance(59)
    assert await restarted.tick() == []  # 90 s
    h.clock.advance(1)
    assert len(await restarted.tick()) == 2  # 91 s


async def test_a_late_answer_counts_until_a_window_after_it(h: Harness) -> None:
    """docs/scaling.md: the limit holds as the downstream sees it. A launch claimed at 0 s
    but still being sent at 60 s (a slow target) may reach the downstream at any
    moment until it is answered: it counts until a window after its answer, not
    after its claim. Written back with its answer time at a handover."""
    gate = asyncio.Event()

    async def slow_first(job: Job) -> LaunchOutcome:
        if job.id == "j0":
            await gate.wait()
        return Accepted()

    h.target.behaviour = slow_first
    await h.create(concurrency=10, rate_limit={"launches": 2, "per_seconds": 60})
    await h.enqueue_many([(f"j{i}", EnqueueRequest()) for i in range(6)])
    assert (await h.reconciler.run_once()).launched == 2  # t=0: j0 (in flight), j1
    await _sent(h, 2)  # j1 answered (accepted) at 0 s
    h.clock.advance(60)
    assert (await h.reconciler.run_once()).launched == 1  # j0 still holds its slot
    h.clock.advance(10)  # j2 waits for the launcher's one worker, held by j0
    gate.set()
    await h.reconciler.drain()  # t=70: j0 and j2 answered
    h.clock.advance(50)
    assert (await h.reconciler.run_once()).launched == 0  # t=120: both count until 130
    await h.reconciler.write_back_rates()  # as before a handover: with answer times
    recent = await h.store.launch_events_recent(queue=h.queue_id,
                                                since=h.clock.now() - timedelta(seconds=60))
    assert recent[""] == [h.clock.now() - timedelta(seconds=50)] * 2  # j0, j2 at 70 s
    h.clock.advance(10)
    assert (await h.reconciler.run_once()).launched == 2  # t=130
    await h.reconciler.drain()


async def test_an_adopter_counts_the_dead_owners_launches_from_the_adoption(
        h: Harness) -> None:
    """A daemon that dies may have sent its launches long after their claim: the
    next owner counts them from the moment it adopts the queue."""
    await h.create(concurrency=10, rate_limit={"launches": 2, "per_seconds": 60})
    await h.enqueue_many([(f"j{i}", EnqueueRequest()) for i in range(6)])
    assert len(await h.tick()) == 2  # t=0, then the daemon dies
    h.clock.advance(45)  # its 30 s lease expired
    adopter = Harness(h.store, h.clock, owner="adopter")
    adopter.queue_id = h.queue_id
    assert await adopter.tick() == []  # t=45: adopted; the launches count from now
    h.clock.advance(59)
    assert await adopter.tick() == []  # t=104
    h.clock.advance(1)
    assert len(await adopter.tick()) == 2  # t=105


async def _sent(h: Harness, launches: int) -> None:
    """Until the target has seen ``launches`` launches and its answers are recorded."""
    for _ in range(1000):
        if len(h.target.launched) >= launches:
            for _ in range(5):
                await asyncio.sleep(0)
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{launches} launches not reached")

"""The Kafka producer's in-flight slots (issue 28): first come, first served; a release
hands the slot to the first waiter still waiting; a waiter cancelled before or after
it got a slot loses none."""

from __future__ import annotations

import asyncio

import pytest

from hipq.targets.kafka_target import Slots


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_waiters_get_the_slots_in_order() -> None:
    slots, got = Slots(2), []

    async def take(name: str) -> None:
        await slots.acquire()
        got.append(name)

    tasks = [asyncio.create_task(take(n)) for n in "abcde"]
    await _turns()
    assert got == ["a", "b"]
    for expected in (["a", "b", "c"], ["a", "b", "c", "d"], ["a", "b", "c", "d", "e"]):
        slots.release()
        await _turns()
        assert got == expected
    await asyncio.gather(*tasks)
    for _ in range(5):
        slots.release()
    await asyncio.wait_for(asyncio.gather(*(slots.acquire() for _ in range(2))), 1)


@pytest.mark.parametrize("after_hand_over", [False, True])
async def test_a_cancelled_waiter_loses_no_slot(after_hand_over: bool) -> None:
    slots = Slots(1)
    await slots.acquire()
    waiting = asyncio.create_task(slots.acquire())
    behind = asyncio.create_task(slots.acquire())
    await _turns()
    if after_hand_over:
        slots.release()  # handed to `waiting`, which is cancelled before it runs
    waiting.cancel()
    await _turns()
    assert waiting.cancelled()
    if not after_hand_over:
        slots.release()
    await asyncio.wait_for(behind, 1)  # the slot went on to the next waiter
    slots.release()
    await asyncio.wait_for(slots.acquire(), 1)  # and nothing was lost


async def test_a_burst_of_releases_wakes_a_waiter_each() -> None:
    slots, n = Slots(1000), 1000
    for _ in range(n):
        await slots.acquire()
    tasks = [asyncio.create_task(slots.acquire()) for _ in range(n)]
    await _turns()
    for _ in range(n):  # acknowledgements by the hundred, before any waiter runs
        slots.release()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert all(t.done() for t in tasks)

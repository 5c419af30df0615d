"""The tick driver under load (issue 28): a wake-up that comes while a tick runs makes
the next tick start right after it, without the debounce (the tick in progress was
the wait that gathered the burst); a wake-up while idle is still debounced."""

from __future__ import annotations

import asyncio

from hipq.engine.tick_driver import TickDriver
from hipq.testing import FakeClock
from tests.unit.test_tick_driver import Ticks, settle


async def test_a_wake_during_a_tick_runs_the_next_one_without_the_debounce() -> None:
    clock = FakeClock()  # its sleep moves it: a debounce shows as time gone by
    ticks = Ticks()
    ticks.gate = asyncio.Event()
    driver = TickDriver(ticks, clock=clock, debounce=7.0)
    driver.start()
    driver.due()
    await settle()
    assert (ticks.count, driver.running) == (1, True)
    before = clock.now()
    for _ in range(10):
        driver.wake()
    ticks.gate.set()
    await settle()
    assert ticks.count == 2  # one more tick, at once
    assert clock.now() == before

    driver.wake()  # idle now: debounced as before
    await settle()
    assert ticks.count == 3
    assert (clock.now() - before).total_seconds() == 7.0
    await driver.stop()

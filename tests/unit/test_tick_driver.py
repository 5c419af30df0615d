"""The tick driver (hipq.engine.tick_driver): one task runs every tick; requests never
pile up; stop lets the tick in progress finish and leaves no task behind."""

from __future__ import annotations

import asyncio

from hipq.engine.tick_driver import TickDriver
from hipq.testing import FakeClock


class Ticks:
    """A tick that records itself and can be held open."""

    def __init__(self) -> None:
        self.count = 0
        self.running = 0
        self.most = 0
        self.gate: asyncio.Event | None = None
        self.full = 0  # this many ticks say a full batch was launched

    async def __call__(self) -> bool:
        self.count += 1
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(0)
        finally:
            self.running -= 1
        if self.full:
            self.full -= 1
            return True
        return False


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def started(ticks: Ticks, debounce: float = 0.005) -> TickDriver:
    driver = TickDriver(ticks, clock=FakeClock(), debounce=debounce)
    driver.start()
    await settle()
    return driver


async def test_a_burst_of_wakes_is_one_tick() -> None:
    ticks = Ticks()
    driver = await started(ticks)
    for _ in range(100):
        driver.wake()
    driver.due()
    await settle()
    assert ticks.count == 1
    await driver.stop()


async def test_a_request_during_a_tick_makes_one_more_after_it() -> None:
    ticks = Ticks()
    ticks.gate = asyncio.Event()
    driver = await started(ticks)
    driver.due()
    await settle()
    assert (ticks.count, driver.running) == (1, True)
    for _ in range(10):
        driver.wake()
        driver.due()
    ticks.gate.set()
    await settle()
    assert ticks.count == 2  # one more, not ten
    assert ticks.most == 1  # never two at once
    await driver.stop()


async def test_a_full_batch_asks_for_the_next_tick_at_once() -> None:
    ticks = Ticks()
    ticks.full = 3
    driver = await started(ticks)
    driver.due()
    await settle()
    assert ticks.count == 4  # three full batches, then one that was not
    await driver.stop()


async def test_tick_now_waits_for_a_tick_that_started_after_it() -> None:
    ticks = Ticks()
    driver = await started(ticks)
    await driver.tick_now()
    assert ticks.count == 1
    await driver.tick_now()
    assert ticks.count == 2
    await driver.stop()


async def test_stop_lets_the_tick_finish_and_nothing_runs_after() -> None:
    ticks = Ticks()
    ticks.gate = asyncio.Event()
    driver = await started(ticks)
    driver.due()
    await settle()
    stopping = asyncio.create_task(driver.stop())
    await settle()
    assert not stopping.done()  # waits for the tick in progress
    ticks.gate.set()
    await stopping
    assert ticks.running == 0
    driver.due()
    driver.wake()
    await settle()
    assert ticks.count == 1
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()
              and t.get_name() == "hipq-ticks"]
    assert others == []
    await driver.stop()  # idempotent


async def test_a_cancelled_stop_does_not_cut_the_tick() -> None:
    ticks = Ticks()
    ticks.gate = asyncio.Event()
    driver = await started(ticks)
    driver.due()
    await settle()
    stopping = asyncio.create_task(driver.stop())
    await settle()
    stopping.cancel()
    await settle()
    assert driver.running  # the tick goes on
    ticks.gate.set()
    await driver.stop()
    assert ticks.count == 1
    assert ticks.running == 0


async def test_the_debounce_uses_the_injected_clock() -> None:
    clock = FakeClock()
    before = clock.now()
    ticks = Ticks()
    driver = TickDriver(ticks, clock=clock, debounce=7.0)
    driver.start()
    driver.wake()
    await settle()
    assert ticks.count == 1
    assert (clock.now() - before).total_seconds() == 7.0  # FakeClock.sleep moves time
    await driver.stop()


def test_due_in_runs_a_tick_later_on_uvloop_and_asyncio() -> None:
    """A pause's end asks for a tick in 0 s or more, repeatedly: the earliest wins,
    and no event loop's handle type may break it (uvloop's call_later(0) handle has
    no ``when()``)."""
    import uvloop

    async def scenario() -> None:
        ticks = Ticks()
        driver = await started(ticks, debounce=0)
        first = ticks.count
        driver.due_in(0.0)
        driver.due_in(0.0)  # a second request while the first is pending
        driver.due_in(0.2)  # later: the earlier one stands
        await asyncio.sleep(0.05)
        assert ticks.count == first + 1
        driver.due_in(0.05)
        driver.due_in(0.01)  # earlier: replaces it
        await asyncio.sleep(0.03)
        assert ticks.count == first + 2
        await asyncio.sleep(0.1)
        assert ticks.count == first + 2  # the replaced timer never fired
        await driver.stop()

    for loop in (uvloop.new_event_loop(), asyncio.new_event_loop()):
        try:
            loop.run_until_complete(scenario())
        finally:
            loop.close()


async def test_a_tick_that_raises_does_not_end_the_driver() -> None:
    calls = 0

    async def tick() -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        return False

    driver = TickDriver(tick, clock=FakeClock(), debounce=0)
    driver.start()
    driver.due()
    await settle()
    driver.due()
    await settle()
    assert calls == 2
    await driver.stop()

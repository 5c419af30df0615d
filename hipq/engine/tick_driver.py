"""The tick driver: when the reconcile tick runs (docs/internals.md, "The tick").

One task, started by :meth:`TickDriver.start`, runs every tick; nothing else runs
one while it lives. It waits for a request, then runs a tick:

* :meth:`~TickDriver.due` (APScheduler's periodic job every
  ``reconcile.interval_seconds``, a lease refresh, a daemon joining or leaving)
  runs a tick at once;
* :meth:`~TickDriver.wake` (an enqueue, a response, a launch's outcome, a NOTIFY)
  runs one after ``debounce`` seconds, so a burst of arrivals makes one tick;
* a request made while a tick runs makes one more tick after it, at once: the
  tick was the wait that gathered the burst (under load, a debounce after every
  tick would only add to every response's way); a tick that launched a full batch
  asks for the next at once (more is due);
* :meth:`~TickDriver.due_in` runs one after a delay (a partner's pause ends then);
  the earliest such request wins. It is the injected clock's timer
  (:meth:`hipq.clock.Clock.call_later`: real seconds, even on a test's clock, which
  must not move itself when it is waited on).

Requests never pile up: any number of them before a tick starts make one tick.
:meth:`~TickDriver.stop` lets the tick in progress finish (a tick cut short could
leave jobs marked running that were never launched), then the task ends; a
request after that does nothing. Every wait is on the injected clock. Who asks
for what is :class:`hipq.engine.facade.Engine`'s business.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from hipq.clock import Clock, Timer

log = logging.getLogger(__name__)

Tick = Callable[[], Awaitable[bool]]  # one tick; True when more is due at once


class TickDriver:
    def __init__(self, tick: Tick, *, clock: Clock, debounce: float) -> None:
        self._tick = tick
        self._clock = clock
        self._debounce = debounce
        self._requested = asyncio.Event()
        self._urgent = False
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._timer: Timer | None = None
        self._timer_at = 0.0  # when it fires, on the clock's monotonic scale
        self.running = False  # a tick is in progress

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="hipq-ticks")

    def due(self) -> None:
        """Run a tick as soon as possible."""
        self._urgent = True
        self._requested.set()

    def wake(self) -> None:
        """Run a tick soon (after the debounce, or right after the tick in
        progress); cheap, safe to call often."""
        if self.running:
            self._urgent = True
        self._requested.set()

    def due_in(self, seconds: float) -> None:
        """Run a tick in ``seconds`` (the clock's timer)."""
        if self._stopping:
            return
        at = self._clock.monotonic() + max(seconds, 0.0)
        if self._timer is not None:  # pending: the earlier one wins
            if self._timer_at <= at:
                return
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._clock.call_later(max(seconds, 0.0), self._fired)

    def _fired(self) -> None:
        self._timer = None
        self.due()

    async def tick_now(self) -> None:
        """Ask for a tick and wait until one that started after this call ended."""
        if self._task is None or self._task.done():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.due()
        await asyncio.shield(waiter)

    async def stop(self) -> None:
        """Let the tick in progress finish, then end the task (idempotent)."""
        self._stopping = True
        if self._timer is not None:
            self._timer.cancel()
        self._requested.set()
        if self._task is not None:
            await asyncio.shield(self._task)

    async def _loop(self) -> None:
        try:
            while await self._next():
                waiters, self._waiters = self._waiters, []
                self.running = True
                try:
                    more = await self._tick()
                except Exception:  # a tick that raises ends itself, never the driver
                    log.exception("reconcile tick raised", extra={"action": "tick_error"})
                    more = False
                finally:
                    self.running = False
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_result(None)
                if more:
                    self.due()
        finally:
            for waiter in self._waiters:
                waiter.cancel()

    async def _next(self) -> bool:
        """Wait for a request (and the debounce of a wake); False once stopping."""
        await self._requested.wait()
        if not self._urgent and self._debounce > 0 and not self._stopping:
            await self._clock.sleep(self._debounce)  # gather the wake-ups of a burst
        self._requested.clear()
        self._urgent = False
        return not self._stopping

"""Time, injected.

Every component that needs the time takes a :class:`Clock`. Production code uses
:class:`SystemClock`; tests use :class:`hipq.testing.FakeClock` and move time
forward instead of sleeping. Stored timestamps are always aware UTC datetimes, and
``now`` is passed into SQL as a bind parameter, never read from the database, so a
fake clock steers PostgreSQL and SQLite alike.

Two kinds of wait: :meth:`Clock.sleep` waits on the clock's own time (a test's clock
moves by that much, at once), :meth:`Clock.call_later` is a timer of the event loop
in real seconds on every clock (a test moves its clock by hand, and a timer must not
wait for that: a confirmation's linger, a pause's end, the wait of an in-tick run).
:func:`wait_for` and :func:`delay` are built on the timers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Protocol, TypeVar

T = TypeVar("T")


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> datetime:
        """Aware UTC wall time, for stored timestamps and comparisons with them."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic scale, for in-process durations."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        """Call ``callback`` in ``seconds`` real seconds (a timer of the running event
        loop); cancel the returned timer to call it off."""
        ...


def loop_timer(seconds: float, callback: Callable[[], object]) -> Timer:
    """:meth:`Clock.call_later` as every clock here does it."""
    return asyncio.get_running_loop().call_later(max(seconds, 0.0), callback)


async def delay(clock: Clock, seconds: float) -> None:
    """Wait ``seconds`` real seconds on ``clock``'s timers (a poll's period)."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def ring() -> None:
        if not done.done():
            done.set_result(None)

    timer = clock.call_later(seconds, ring)
    try:
        await done
    finally:
        timer.cancel()


async def wait_for(clock: Clock, awaitable: Awaitable[T], seconds: float) -> T:
    """``awaitable``'s result, or TimeoutError (it is cancelled) once ``seconds`` real
    seconds have passed on ``clock``'s timers."""
    task = asyncio.ensure_future(awaitable)
    expired = False

    def expire() -> None:
        nonlocal expired
        if not task.done():
            expired = True
            task.cancel()

    timer = clock.call_later(seconds, expire)
    try:
        return await task
    except asyncio.CancelledError:
        if expired:
            raise TimeoutError from None
        raise
    finally:
        timer.cancel()


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        return loop_timer(seconds, callback)


def utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime (naive values are taken as UTC)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)

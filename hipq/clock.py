"""Time, injected.

Every component that needs the time takes a :class:`Clock`. Production code uses
:class:`SystemClock`; tests use :class:`hipq.testing.FakeClock` and move time
forward instead of sleeping. Stored timestamps are always aware UTC datetimes, and
``now`` is passed into SQL as a bind parameter, never read from the database, so a
fake clock steers PostgreSQL and SQLite alike.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Aware UTC wall time, for stored timestamps and comparisons with them."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic scale, for in-process durations."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime (naive values are taken as UTC)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)

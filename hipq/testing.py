"""Helpers for tests and embedding: a fake clock and an in-memory target."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from hipq.jobs import Job
from hipq.targets.base import Accepted, Completed, LaunchOutcome

__all__ = ["FakeClock", "MemoryTarget"]


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)

    def advance(self, seconds: float = 0.0, **delta: float) -> datetime:
        step = timedelta(seconds=seconds, **delta)
        self._now += step
        self._mono += step.total_seconds()
        return self._now

    def set(self, when: datetime) -> None:
        self._mono += (when - self._now).total_seconds()
        self._now = when


Behaviour = Callable[[Job], Awaitable[LaunchOutcome] | LaunchOutcome]


class MemoryTarget:
    """Records every launch. By default answers :class:`Accepted` (the outcome is
    reported later, like an HTTP callback); ``behaviour`` can answer otherwise."""

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.launched: list[Job] = []
        self.behaviour = behaviour

    async def launch(self, job: Job) -> LaunchOutcome:
        self.launched.append(job)
        if self.behaviour is None:
            return Accepted()
        outcome = self.behaviour(job)
        if asyncio.iscoroutine(outcome):
            return await outcome  # type: ignore[no-any-return]
        return outcome  # type: ignore[return-value]

    async def close(self) -> None:
        return None

    def ids(self) -> list[str]:
        return [job.id for job in self.launched]


def succeed(job: Job) -> Completed:
    """A MemoryTarget behaviour: every launch succeeds at once."""
    return Completed(status="succeeded", result={"echo": job.id})

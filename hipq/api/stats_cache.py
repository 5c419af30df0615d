"""Queue stats and response counts for the read routes, computed at most once per
:data:`MAX_AGE_SECONDS` (docs/security.md: reads stay cheap whatever the table sizes).

``/v1/stats``, ``/metrics`` and the queue routes all read the same snapshot, so
a client polling them (or many clients at once) costs one pair of aggregate
queries per interval, not one per request. Concurrent readers of an expired
snapshot wait for a single refresh. The snapshot is per process: two daemons
each refresh their own.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from aiohttp import web

from hipq.clock import Clock, SystemClock
from hipq.service import Hipq
from hipq.store import QueueStats

MAX_AGE_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    queues: tuple[QueueStats, ...]
    responses: dict[str, int]
    taken_at: float  # the clock's monotonic time

    def queue(self, queue_id: str, *, paused: bool) -> QueueStats | None:
        """One queue's counts (``paused`` as the caller just read it)."""
        found = next((s for s in self.queues if s.queue == queue_id), None)
        return None if found is None else replace(found, paused=paused)


class StatsCache:
    def __init__(self, service: Hipq, *, clock: Clock | None = None,
                 max_age: float = MAX_AGE_SECONDS) -> None:
        self.service = service
        self.clock = clock or SystemClock()  # in-process ages, whatever clock jobs use
        self.max_age = max_age
        self.refreshes = 0
        self._snapshot: Snapshot | None = None
        self._lock = asyncio.Lock()

    def _fresh(self) -> Snapshot | None:
        snap = self._snapshot
        if snap is not None and self.clock.monotonic() - snap.taken_at < self.max_age:
            return snap
        return None

    async def get(self) -> Snapshot:
        snap = self._fresh()
        if snap is not None:
            return snap
        async with self._lock:
            snap = self._fresh()  # another reader refreshed it meanwhile
            if snap is None:
                queues = tuple(await self.service.stats())
                responses = await self.service.response_counts()
                snap = Snapshot(queues, responses, self.clock.monotonic())
                self._snapshot = snap
                self.refreshes += 1
            return snap

    def forget(self) -> None:
        """Drop the snapshot (a queue was created: it must show up)."""
        self._snapshot = None


STATS = web.AppKey("hipq_stats", StatsCache)

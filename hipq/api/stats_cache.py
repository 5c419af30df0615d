"""Queue stats and response counts for the read routes, computed at most once per
:data:`MAX_AGE_SECONDS` (docs/security.md: reads stay cheap whatever the table sizes).

``/v1/stats``, ``/metrics`` and the queue routes all read the same snapshot, so
a client polling them (or many clients at once) costs one set of aggregate
queries per interval, not one per request. Concurrent readers of an expired
snapshot wait for a single refresh. The snapshot is per process: two daemons
each refresh their own.

It also holds the partner's word (docs/throttling.md) as the owners stored it: every pause
(readers keep those in force at their own now) and each queue's learned state. A
resume ends a queue's pauses in the store; :meth:`StatsCache.forget_pauses` drops
them from the snapshot too (and from a refresh in flight), so no answer shows them
after the resume.

And the intake's rows (docs/from-your-database.md) by queue, pending and rejected: one
grouped count per refresh (docs/from-your-database.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from aiohttp import web

from hipq.clock import Clock, SystemClock
from hipq.engine.partner_word import effective_limit, learned_rate
from hipq.metrics import QueueWord
from hipq.service import Hipq
from hipq.spec import QueueSpec
from hipq.store import QueueStats
from hipq.store.records import Backoff, QueueState

MAX_AGE_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    queues: tuple[QueueStats, ...]
    responses: dict[str, int]
    taken_at: float  # the clock's monotonic time
    pauses: Mapping[str, tuple[Backoff, ...]] = field(default_factory=dict)  # soonest end first
    states: Mapping[str, QueueState] = field(default_factory=dict)
    intake: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # (pending, rejected)

    def queue(self, queue_id: str, *, paused: bool) -> QueueStats | None:
        """One queue's counts (``paused`` as the caller just read it)."""
        found = next((s for s in self.queues if s.queue == queue_id), None)
        return None if found is None else replace(found, paused=paused)

    def intake_pending(self, queue_id: str) -> int:
        """The queue's rows in the intake, not ingested yet."""
        return self.intake.get(queue_id, (0, 0))[0]

    def intake_totals(self) -> dict[str, int]:
        """The intake's rows in all: pending and rejected (of every queue, known or not)."""
        return {"pending": sum(p for p, _ in self.intake.values()),
                "rejected": sum(r for _, r in self.intake.values())}

    def pauses_in_force(self, queue_id: str, now: datetime,
                        limit: int | None = None) -> list[Backoff]:
        """The queue's partner pauses still in force at ``now``, soonest end first."""
        found = [b for b in self.pauses.get(queue_id, ()) if b.until > now]
        return found if limit is None else found[:limit]

    def word(self, queue_id: str, spec: QueueSpec, now: datetime) -> QueueWord:
        """The partner's word on the queue at ``now``: its pauses in force, the
        concurrency in force (the adaptive limit, else the configured one), the held
        jobs of its last tick and its throttled tries."""
        state = self.states.get(queue_id)
        adaptive = spec.adaptive
        return QueueWord(
            queue=queue_id, paused_scopes=len(self.pauses_in_force(queue_id, now)),
            throttled_total=0 if state is None else state.throttled_total,
            effective_concurrency=effective_limit(
                spec.concurrency, None if adaptive is None else adaptive.min,
                None if state is None else state.effective),
            held=dict(state.held or {}) if state is not None else {},
            learned_rate=None if state is None else learned_rate(state, now))

    def without_pauses(self, queues: set[str]) -> Snapshot:
        if not queues.intersection(self.pauses):
            return self
        return replace(self, pauses={q: b for q, b in self.pauses.items() if q not in queues})


def _by_queue(pauses: list[Backoff]) -> dict[str, tuple[Backoff, ...]]:
    grouped: dict[str, list[Backoff]] = {}
    for pause in sorted(pauses, key=lambda b: (b.until, b.group or "")):
        grouped.setdefault(pause.queue, []).append(pause)
    return {queue: tuple(found) for queue, found in grouped.items()}


class StatsCache:
    def __init__(self, service: Hipq, *, clock: Clock | None = None,
                 max_age: float = MAX_AGE_SECONDS) -> None:
        self.service = service
        self.clock = clock or SystemClock()  # in-process ages, whatever clock jobs use
        self.max_age = max_age
        self.refreshes = 0
        self._snapshot: Snapshot | None = None
        self._lock = asyncio.Lock()
        self._resumed: set[str] = set()  # queues resumed while a refresh was reading

    def _fresh(self, max_age: float) -> Snapshot | None:
        snap = self._snapshot
        if snap is not None and self.clock.monotonic() - snap.taken_at < max_age:
            return snap
        return None

    async def get(self, *, max_age: float | None = None) -> Snapshot:
        """The snapshot, refreshed when older than ``max_age`` (at most the cache's;
        ``/metrics`` caches its gauges itself and asks for 0: a fresh read)."""
        age = self.max_age if max_age is None else min(max_age, self.max_age)
        snap = self._fresh(age)
        if snap is not None:
            return snap
        async with self._lock:
            snap = self._fresh(age)  # another reader refreshed it meanwhile
            if snap is None:
                snap = await self._read()
                self._snapshot = snap
                self.refreshes += 1
            return snap

    async def _read(self) -> Snapshot:
        self._resumed = set()
        store = self.service.store
        queues = tuple(await self.service.stats())
        responses = await self.service.response_counts()
        pauses = _by_queue(await store.backoff_list(queues=None))
        states = await store.queue_state_list(queues=None)
        intake = await store.intake_counts()
        snap = Snapshot(queues, responses, self.clock.monotonic(), pauses, states, intake)
        return snap.without_pauses(self._resumed)

    def forget_pauses(self, queue: str) -> None:
        """A resume ended the queue's partner pauses in the store: forget them here."""
        self._resumed.add(queue)
        if self._snapshot is not None:
            self._snapshot = self._snapshot.without_pauses({queue})

    def forget(self) -> None:
        """Drop the snapshot (a queue was created: it must show up)."""
        self._snapshot = None


STATS = web.AppKey("hipq_stats", StatsCache)

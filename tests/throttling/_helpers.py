"""Helpers for the throttling suite: a harness driving one queue through ticks,
and an independent oracle for time windows (not the implementation's own code)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from hipq.bodies import EnqueueRequest, ResponseRequest
from hipq.config import QueueConfig
from hipq.engine import Reconciler
from hipq.jobs import Job
from hipq.service import Hipq
from hipq.store import InsertOutcome, Response, Store
from hipq.targets import Targets
from hipq.testing import FakeClock, MemoryTarget

MEMORY_TARGET: dict[str, Any] = {"kind": "memory", "name": "t"}

_numbers = itertools.count()


def fresh_id(prefix: str) -> str:
    """A queue id (or owner) never used before in this process."""
    return f"{prefix}{next(_numbers)}"


def queue(queue_id: str, **settings: Any) -> QueueConfig:
    return QueueConfig(id=queue_id, target=MEMORY_TARGET, **settings)


class Harness:
    """One queue on a shared database, with its own target and reconciler."""

    def __init__(self, store: Store, clock: FakeClock, *, owner: str | None = None) -> None:
        self.store, self.clock = store, clock
        self.hipq = Hipq(store, clock=clock)
        self.target = MemoryTarget()
        self.owner = owner or fresh_id("owner")
        self.reconciler = Reconciler(store, clock=clock, owner=self.owner,
                                     targets=Targets(memory={"t": self.target}))
        self.queue_id = ""

    async def create(self, queue_id: str | None = None, **settings: Any) -> QueueConfig:
        self.queue_id = queue_id or fresh_id("q")
        config = queue(self.queue_id, **settings)
        await self.hipq.create_queue(config)
        return config

    async def leave(self) -> None:
        """Out of later tests' way: the queue paused, this daemon's leases released
        and its membership gone (clocks jump between examples: a heartbeat stamped
        later than the next example's clock would count this daemon as live and
        shrink the next one's fair share of the queues)."""
        if self.queue_id:
            await self.hipq.set_paused(self.queue_id, True)
        leases = self.reconciler.leases
        await self.store.lease_release_many(queues=sorted(leases.owned), owner=self.owner)
        await self.store.daemon_leave(owner=self.owner)

    async def enqueue(self, job_id: str, **fields: Any) -> InsertOutcome:
        return await self.hipq.enqueue(self.queue_id, job_id, EnqueueRequest(**fields))

    async def enqueue_many(self, items: Sequence[tuple[str, EnqueueRequest]]
                           ) -> list[InsertOutcome]:
        return await self.hipq.enqueue_many(self.queue_id, items)

    async def tick(self) -> list[Job]:
        """One reconcile pass; returns the jobs it launched (as the target saw them)."""
        before = len(self.target.launched)
        await self.reconciler.run_once()
        await self.reconciler.drain()
        return self.target.launched[before:]

    async def running(self) -> list[Job]:
        return await self.store.job_load_running(queue=self.queue_id)

    async def job(self, job_id: str) -> Job:
        found = await self.store.job_get(self.queue_id, job_id)
        assert found is not None, job_id
        return found

    async def respond(self, job: Job, status: str = "succeeded", **fields: Any) -> None:
        assert job.correlation_key is not None
        await self.hipq.report_response(job.correlation_key,
                                        ResponseRequest(status=status, **fields))  # type: ignore[arg-type]

    async def respond_many(self, jobs: Sequence[Job], status: str = "succeeded") -> None:
        """Answer for many running jobs in one inbox write."""
        responses = [Response(correlation_key=j.correlation_key or "", attempt=j.attempt,
                              status=status, source="test") for j in jobs]
        if responses:
            await self.store.inbox_insert_many(responses, now=self.clock.now())

    async def finish_running(self, ids: Sequence[str] | None = None) -> int:
        """Answer success for running jobs (all, or those in ``ids``)."""
        jobs = [j for j in await self.running() if ids is None or j.id in ids]
        await self.respond_many(jobs)
        return len(jobs)

    def launched_ids(self) -> list[str]:
        return self.target.ids()


def weight_by(jobs: Sequence[Job], key: Any) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for job in jobs:
        out[key(job)] = out.get(key(job), 0) + job.weight
    return out


# -- the time-window oracle ---------------------------------------------------------


def _hm(text: str) -> time:
    hours, minutes = text.split(":")
    return time(int(hours), int(minutes))


def local_instant(day: date, at: time, zone: ZoneInfo) -> datetime:
    """The UTC instant a local wall time of ``day`` denotes: its first occurrence if
    repeated (fall back); if skipped (spring forward), the first instant after the
    gap. Found by scanning minutes, independently of zoneinfo's fold rules."""
    wall = datetime.combine(day, at)
    guess = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if guess.astimezone(zone).replace(tzinfo=None) == wall:
        return guess  # exists (fold=0 is the first of two occurrences)
    probe = wall.replace(tzinfo=zone, fold=1).astimezone(UTC) - timedelta(hours=2)
    while probe.astimezone(zone).replace(tzinfo=None) < wall:
        probe += timedelta(minutes=1)
    # the gap starts on a whole minute; step back to the exact transition second
    while (probe - timedelta(seconds=1)).astimezone(zone).replace(tzinfo=None) >= wall:
        probe -= timedelta(seconds=1)
    return probe


def window_open(windows: Sequence[Mapping[str, str]] | None, tz: str, at: datetime) -> bool:
    """Oracle: is ``at`` inside one of the daily windows ``[start, end)`` (local
    wall times in ``tz``; end <= start crosses midnight; start == end never)?"""
    if not windows:
        return True
    zone = ZoneInfo(tz)
    today = at.astimezone(zone).date()
    for offset in (-1, 0):
        day = today + timedelta(days=offset)
        for window in windows:
            start, end = _hm(window["start"]), _hm(window["end"])
            if start == end:
                continue
            end_day = day + timedelta(days=1) if end <= start else day
            opens, closes = local_instant(day, start, zone), local_instant(end_day, end, zone)
            if opens <= at < closes:
                return True
    return False

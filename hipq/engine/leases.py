"""Queue leases and the adoption of running jobs.

State model. A lease row per queue (``leases``: queue, owner, expires_at) says which
daemon owns the queue; the database is authoritative, :attr:`Leases.held` is this
daemon's copy of what it held at its last renewal. A lease is renewed every third
of ``lease_seconds`` (and at once when queues appear or go away), so a healthy
daemon never lets one lapse.

Failure modes: a daemon that dies stops renewing; after ``lease_seconds`` another
daemon acquires the queue and adopts its running jobs (:func:`adopt`): confirmed
launches keep waiting for their response or deadline, unconfirmed ones fail with
``lost``. A daemon that finds it lost a lease drops that queue from its batch.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from hipq.engine.batch import Entry
from hipq.engine.decide import outcome_lost
from hipq.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseChange:
    gained: list[str]
    lost: list[str]


class Leases:
    def __init__(self, store: Store, *, owner: str, lease_seconds: float) -> None:
        self.store = store
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.held: set[str] = set()
        self._renewed_at: datetime | None = None
        self._seen: set[str] = set()

    async def refresh(self, queues: Collection[str], now: datetime) -> LeaseChange:
        """Acquire and renew leases when due; what was gained and lost since."""
        renew_every = timedelta(seconds=self.lease_seconds / 3)
        if (self._renewed_at is not None and now - self._renewed_at < renew_every
                and set(queues) == self._seen):
            return LeaseChange(gained=[], lost=[])
        held = await self.store.lease_acquire_many(
            queues=list(queues), owner=self.owner, now=now, seconds=self.lease_seconds)
        self._renewed_at, self._seen = now, set(queues)
        change = LeaseChange(gained=sorted(held - self.held), lost=sorted(self.held - held))
        for queue in change.lost:
            log.warning("lost the lease on queue %s", queue, extra={"action": "lease_lost"})
        self.held = held
        return change


async def adopt(store: Store, *, queue: str, owner: str, now: datetime) -> list[Entry]:
    """Take over the running jobs of a queue whose lease was just acquired: they
    become ours; an unconfirmed launch ends as a ``lost`` try."""
    running = await store.job_load_running(queue=queue)
    await store.job_adopt_many(queue=queue, ids=[j.id for j in running], owner=owner, now=now)
    entries = []
    for job in running:
        job = replace(job, owner=owner)
        entry = Entry(job=job, deadline=job.deadline)
        if not job.launch_confirmed:
            entry.outcome = outcome_lost()
        entries.append(entry)
    if running:
        log.info("adopted %d running jobs of queue %s", len(running), queue,
                 extra={"action": "adopt", "queue": queue})
    return entries

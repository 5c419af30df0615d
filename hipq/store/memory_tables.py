"""The memory store's tables (:mod:`hipq.store.memory`): plain dicts in the shape of
the SQL drivers' tables, with the indexes their statements rely on (live jobs by
correlation key, by ordering key, those that can expire; pending responses by
key), kept true by the few functions here that write jobs, tries and responses.

Values go in and out as copies: a job, a try or a response read back is a new
object, as a row read from a database is, so a caller that changes what it got
changes nothing stored. No SQL, no I/O: nothing survives the process.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hipq.jobs import Attempt, Job, JobState, json_copy
from hipq.store.driver import DriverBase, JobKey
from hipq.store.history import entry_error
from hipq.store.records import (
    Backoff,
    Change,
    InboxOutcome,
    InboxRow,
    IntakeRow,
    QueueState,
)
from hipq.store.seen import PartnerMinute, PartnerSeen
from hipq.store.versions import SCHEMA_VERSION

QUEUED, RUNNING = JobState.QUEUED, JobState.RUNNING
Lease = tuple[str, datetime, datetime]  # owner, acquired_at, expires_at
Member = tuple[datetime, datetime]  # a daemon's started_at, expires_at


def copied(value: Any) -> Any:
    """A JSON value as a new object (None stays None)."""
    return None if value is None else json_copy(value)


@dataclass(slots=True, kw_only=True)
class TryRow:
    """A row of ``job_attempts``: one try of a job, or a late response to it."""

    id: int
    queue: str
    job_id: str
    attempt: int
    correlation_key: str | None
    launched_at: datetime | None
    finished_at: datetime
    outcome: str
    error: Any
    response: Any

    def entry(self, *, response: bool = True) -> Attempt:
        return Attempt(attempt=self.attempt, launched_at=self.launched_at,
                       finished_at=self.finished_at, outcome=self.outcome,
                       error=entry_error(copied(self.error)),
                       response=copied(self.response) if response else None)


@dataclass(slots=True, kw_only=True)
class InboxEntry:
    """A row of ``response_inbox``: a response, pending until it has an outcome."""

    id: int
    correlation_key: str
    attempt: int | None
    status: str
    retryable: bool | None
    result: Any
    error: Any
    extend_seconds: float | None
    source: str
    dedup_key: str | None
    received_at: datetime
    token: str | None
    applied_at: datetime | None = None
    outcome: str | None = None

    def row(self) -> InboxRow:
        return InboxRow(id=self.id, correlation_key=self.correlation_key, attempt=self.attempt,
                        status=self.status, retryable=self.retryable,
                        result=copied(self.result), error=copied(self.error),
                        extend_seconds=self.extend_seconds, source=self.source,
                        received_at=self.received_at, token=self.token)


@dataclass(slots=True)
class Tables:
    """Every table of a hipq database, in memory."""

    meta: dict[str, str] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> row
    live: dict[str, dict[str, Job]] = field(default_factory=dict)  # queue -> id -> job
    archived: dict[JobKey, Job] = field(default_factory=dict)
    merged: dict[JobKey, tuple[str, str]] = field(default_factory=dict)  # (into_id, body_hash)
    tries: dict[JobKey, list[TryRow]] = field(default_factory=dict)  # by id
    inbox: dict[int, InboxEntry] = field(default_factory=dict)  # by id
    launches: dict[str, list[tuple[str, datetime]]] = field(default_factory=dict)
    leases: dict[str, Lease] = field(default_factory=dict)
    daemons: dict[str, Member] = field(default_factory=dict)
    backoffs: dict[tuple[str, str], Backoff] = field(default_factory=dict)  # (queue, scope)
    queue_state: dict[str, QueueState] = field(default_factory=dict)
    partner_state: dict[str, PartnerSeen] = field(default_factory=dict)
    partner_minutes: dict[tuple[str, datetime], PartnerMinute] = field(default_factory=dict)
    intake: dict[int, IntakeRow] = field(default_factory=dict)  # by id
    # -- indexes ---------------------------------------------------------------------
    keys: dict[str, JobKey] = field(default_factory=dict)  # live jobs' correlation keys
    ordering: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # live ids
    expiring: set[JobKey] = field(default_factory=set)  # live jobs with an expires_at
    tries_by_key: dict[str, list[TryRow]] = field(default_factory=dict)  # by id
    pending: dict[int, InboxEntry] = field(default_factory=dict)  # no outcome yet, by id
    pending_by_key: dict[str, dict[int, InboxEntry]] = field(default_factory=dict)
    dedup: dict[str, int] = field(default_factory=dict)  # inbox id by dedup_key
    # the next ids of job_attempts, response_inbox and job_intake (never reused)
    try_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    inbox_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    intake_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    # -- jobs --------------------------------------------------------------------------

    def live_job(self, queue: str, job_id: str) -> Job | None:
        jobs = self.live.get(queue)
        return None if jobs is None else jobs.get(job_id)

    def stored(self, queue: str, job_id: str) -> Job | None:
        """The job (queue, id), live, or else archived."""
        job = self.live_job(queue, job_id)
        return self.archived.get((queue, job_id)) if job is None else job

    def put_live(self, job: Job) -> None:
        """Insert or replace a live job (the caller checked its correlation key)."""
        jobs = self.live.setdefault(job.queue, {})
        old = jobs.get(job.id)
        if old is not None:
            self._unindex(old)
        jobs[job.id] = job
        if job.correlation_key is not None:
            self.keys[job.correlation_key] = job.key
        if job.ordering_key is not None:
            self.ordering.setdefault((job.queue, job.ordering_key), set()).add(job.id)
        if job.expires_at is not None:
            self.expiring.add(job.key)

    def drop_live(self, queue: str, job_id: str) -> Job | None:
        jobs = self.live.get(queue)
        job = None if jobs is None else jobs.pop(job_id, None)
        if job is not None:
            self._unindex(job)
            if not jobs:
                del self.live[queue]
        return job

    def _unindex(self, job: Job) -> None:
        if job.correlation_key is not None and self.keys.get(job.correlation_key) == job.key:
            del self.keys[job.correlation_key]
        if job.ordering_key is not None:
            ids = self.ordering.get((job.queue, job.ordering_key))
            if ids is not None:
                ids.discard(job.id)
                if not ids:
                    del self.ordering[(job.queue, job.ordering_key)]
        self.expiring.discard(job.key)

    def key_taken(self, key: str | None, by: JobKey) -> bool:
        """Whether a live job other than ``by`` holds the correlation key ``key``."""
        holder = None if key is None else self.keys.get(key)
        return holder is not None and holder != by

    def archive(self, ended: Job) -> None:
        """Move an ended job (already dropped from the live ones) to the archive; an id
        archived before keeps its first archive (as the drivers' guarded insert)."""
        self.archived.setdefault(ended.key, ended)

    def archive_queued(self, job: Job, status: str, error: Any, now: datetime) -> Job:
        """End the queued ``job`` without a launch: (the archived job)."""
        self.drop_live(job.queue, job.id)
        ended = job.evolve(status=JobState(status), error=copied(error), updated_at=now,
                           finished_at=now)
        self.archive(ended)
        return ended

    def forget_archived(self, key: JobKey) -> None:
        """Delete an archived job with its tries (a prune)."""
        self.archived.pop(key, None)
        for row in self.tries.pop(key, []):
            if row.correlation_key is not None:
                rows = self.tries_by_key[row.correlation_key]
                rows.remove(row)
                if not rows:
                    del self.tries_by_key[row.correlation_key]

    # -- tries ---------------------------------------------------------------------------

    def record_try(self, queue: str, job_id: str, *, attempt: int, key: str | None,
                   launched_at: datetime | None, finished_at: datetime, outcome: str,
                   error: Any, response: Any) -> None:
        row = TryRow(id=next(self.try_ids), queue=queue, job_id=job_id, attempt=attempt,
                     correlation_key=key, launched_at=launched_at, finished_at=finished_at,
                     outcome=outcome, error=copied(error), response=copied(response))
        self.tries.setdefault((queue, job_id), []).append(row)
        if key is not None:
            self.tries_by_key.setdefault(key, []).append(row)

    def record_change(self, change: Change, now: datetime) -> None:
        """The try a change of step 3 ends (ARCHIVE, REQUEUE)."""
        self.record_try(change.queue, change.id, attempt=change.attempt,
                        key=change.correlation_key, launched_at=change.launched_at,
                        finished_at=now, outcome=change.outcome or "unknown",
                        error=change.error, response=change.response)

    def history(self, queue: str, job_id: str) -> list[TryRow]:
        """A job's tries by (attempt, id)."""
        return sorted(self.tries.get((queue, job_id), ()), key=lambda r: (r.attempt, r.id))

    # -- the inbox -----------------------------------------------------------------------

    def mark(self, marks: Sequence[tuple[int, InboxOutcome]], now: datetime) -> None:
        """Give pending rows their outcome (a row already marked keeps its own)."""
        for row_id, outcome in marks:
            entry = self.pending.pop(row_id, None)
            if entry is None:
                continue
            entry.applied_at, entry.outcome = now, str(outcome)
            by_key = self.pending_by_key[entry.correlation_key]
            del by_key[row_id]
            if not by_key:
                del self.pending_by_key[entry.correlation_key]

    def forget_response(self, row_id: int) -> None:
        """Delete an inbox row that has its outcome (a prune); its dedup_key is free."""
        entry = self.inbox.pop(row_id)
        if entry.dedup_key is not None:
            self.dedup.pop(entry.dedup_key, None)


class MemoryBase(DriverBase):
    """The shared half of :class:`~hipq.store.memory.MemoryStore`: its tables, and
    what a SQL driver does with a database that has no meaning here."""

    dialect = "memory"
    supports_row_locks = False  # one event loop: every call runs whole, one at a time
    supports_reads_beside_writes = False  # the engine reads no page ahead here
    supports_notify = False  # no other process shares it

    def __init__(self) -> None:
        super().__init__()
        self._t = Tables()
        self._closed = False

    async def _drop_pool(self) -> None:
        """No connections: nothing to start over."""

    async def close(self) -> None:
        """Drop every table: the store is unusable afterwards."""
        self._closed = True
        self._t = Tables()

    def checked_out(self) -> int:
        return 0  # no pool

    async def _read_version(self) -> int | None:
        return SCHEMA_VERSION  # made in its latest shape, never migrated

    async def check_schema(self) -> None:
        """Nothing to check: the tables are made by the store itself, as this hipq
        needs them."""

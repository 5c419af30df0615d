"""The memory store's steps of the reconcile loop: the due jobs (step 1), the claim
(step 4) with its launch events, confirmations, step 3's persist, the in-tick
archive, and where a queued job stands. A base of
:class:`~hipq.store.memory.MemoryStore`; see :mod:`hipq.store.memory_tables`.

Every update of a running job is guarded as the SQL drivers guard it (status,
attempt, owner), and what a method returns is what it changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime, timedelta
from typing import Any

from hipq.errors import StoreConflict
from hipq.jobs import Job, JobState, Ordering, generated_key
from hipq.store.driver import JobKey, QueueCounts
from hipq.store.due import RELAXED, DueShape
from hipq.store.memory_tables import QUEUED, RUNNING, MemoryBase, copied
from hipq.store.records import Change, ChangeKind, InboxOutcome, JobStanding

OrderKey = Callable[[Job], tuple[Any, ...]]


def order_key(by_time: bool) -> OrderKey:
    """A queue's order: (run_at, priority, id), or (priority, run_at, id)."""
    if by_time:
        return lambda j: (j.run_at, j.priority, j.id)
    return lambda j: (j.priority, j.run_at, j.id)


def _earlier(a: Job, b: Job) -> bool:
    """(a.key_order_at, a.id) < (b.key_order_at, b.id) as SQL compares rows: unknown
    (not earlier) where a time is missing."""
    if a.key_order_at is None or b.key_order_at is None:
        return False
    return (a.key_order_at, a.id) < (b.key_order_at, b.id)


def _holds_back(k: Job, job: Job, now: datetime, relaxed: bool) -> bool:
    """Whether ``k``, of ``job``'s ordering key, keeps ``job`` from being due: it runs,
    or is queued before it (``relaxed``: unless it waits for its retry)."""
    if k.status is RUNNING:
        return True
    return (k.id != job.id and _earlier(k, job)
            and not (relaxed and k.attempt > 0 and k.run_at > now))


def _deadline(job: Job, now: datetime, heartbeat_seconds: float | None) -> datetime:
    seconds = job.timeout_seconds
    if heartbeat_seconds is not None and heartbeat_seconds <= seconds:
        seconds = heartbeat_seconds
    return now + timedelta(seconds=seconds)


class MemoryLoop(MemoryBase):
    """Steps 1, 3 and 4 of the reconcile loop, and a queued job's standing."""

    # -- step 1: due jobs ------------------------------------------------------------------

    def _queued(self, queue: str) -> Iterable[Job]:
        return (j for j in self._t.live.get(queue, {}).values() if j.status is QUEUED)

    def _key_free(self, job: Job, now: datetime, relaxed: bool) -> bool:
        """Whether ``job`` heads its ordering key (a job without one always does)."""
        if job.ordering_key is None:
            return True
        jobs = self._t.live[job.queue]
        return not any(_holds_back(jobs[i], job, now, relaxed)
                       for i in self._t.ordering.get((job.queue, job.ordering_key), ()))

    async def _fetch_due(self, shape: DueShape, *, now: datetime, limit: int) -> list[Job]:
        excluding = set(shape.default_group_excluding or ())
        due = [j for j in self._queued(shape.queue)
               if j.run_at <= now and (not shape.critical_only or j.critical)
               and (j.group_key == shape.group if shape.group is not None
                    else j.group_key is None or j.group_key not in excluding)]
        return self._heads(due, order_key(shape.by_time), now, shape.relaxed, limit)

    def _heads(self, due: list[Job], key: OrderKey, now: datetime, relaxed: bool,
               limit: int) -> list[Job]:
        """The first ``limit`` of ``due`` in order that head their ordering keys."""
        due.sort(key=key)
        out: list[Job] = []
        for job in due:
            if len(out) >= limit:
                break
            if self._key_free(job, now, relaxed):
                out.append(job.snapshot())
        return out

    async def job_fetch_due_after(self, *, queue: str, now: datetime, limit: int,
                                  ordering: Ordering, after: Job, ran: AbstractSet[str],
                                  key_mode: str = "strict") -> list[Job] | None:
        """As PostgreSQL's: None if a queued job due at ``now``, up to ``after`` in
        ``ordering``, is not in ``ran``; else the plain read of the jobs after it."""
        key = order_key(ordering is Ordering.TIME_THEN_PRIORITY)
        last = key(after)
        due = [j for j in self._queued(queue) if j.run_at <= now]
        if any(key(j) <= last and j.id not in ran for j in due):
            return None
        return self._heads([j for j in due if key(j) > last], key, now, key_mode == RELAXED,
                           limit)

    async def job_count_due(self, *, queue: str, now: datetime, limit: int) -> int:
        return min(sum(1 for j in self._queued(queue) if j.run_at <= now), limit)

    # -- step 4: claims, launch events, confirmations ---------------------------------------

    async def job_mark_running_many(self, *, queue: str, ids: Sequence[str], now: datetime,
                                    owner: str, heartbeat_seconds: float | None,
                                    rate_groups: Mapping[str, str] | None = None,
                                    known: Mapping[str, Job] | None = None) -> list[Job]:
        """All or nothing, as one statement: a new correlation key that a live job
        holds refuses the whole claim (StoreConflict)."""
        t = self._t
        claimed: dict[str, Job] = {}
        for job_id in ids:
            job = t.live_job(queue, job_id)
            if job is None or job.status is not QUEUED or job_id in claimed:
                continue
            attempt = job.attempt + 1
            claimed[job_id] = job.evolve(
                status=RUNNING, attempt=attempt, launched_at=now,
                deadline=_deadline(job, now, heartbeat_seconds), owner=owner,
                launch_confirmed=False, updated_at=now,
                correlation_key=job.correlation_key if job.correlation_fixed
                else generated_key(job.token, attempt))
        self._check_keys(claimed.values())
        for job in claimed.values():
            t.put_live(job)
        events = [(rate_groups[i], now) for i in claimed if rate_groups and i in rate_groups]
        if events:  # these launches count against the queue's rate limit
            t.launches.setdefault(queue, []).extend(events)
        return [claimed[i].snapshot() for i in ids if i in claimed]

    def _check_keys(self, claimed: Iterable[Job]) -> None:
        """Raises StoreConflict if a live job, or another of ``claimed``, holds the
        correlation key of one of ``claimed`` (the unique index of the SQL drivers)."""
        seen: set[str] = set()
        for job in claimed:
            key = job.correlation_key
            if key is not None and (key in seen or self._t.key_taken(key, job.key)):
                raise StoreConflict(f"the database refused the write: correlation key "
                                    f"{key!r} is held by another live job")
            if key is not None:
                seen.add(key)

    async def job_confirm_launch_many(self, *, keys: Sequence[tuple[str, str, int]],
                                      owner: str) -> int:
        confirmed = 0
        for queue, job_id, attempt in dict.fromkeys(keys):
            job = self._t.live_job(queue, job_id)
            if job is not None and job.owner == owner and job.attempt == attempt:
                self._t.put_live(job.evolve(launch_confirmed=True))
                confirmed += 1
        return confirmed

    async def launch_events_recent(self, *, queue: str,
                                   since: datetime) -> dict[str, list[datetime]]:
        kept = [(g, at) for g, at in self._t.launches.get(queue, ()) if at > since]
        self._set_launches(queue, kept)
        out: dict[str, list[datetime]] = {}
        for group, at in kept:
            out.setdefault(group, []).append(at)
        return out

    async def launch_events_restamp(self, *, queue: str, at: datetime) -> int:
        events = self._t.launches.get(queue, [])
        moved = sum(1 for _, when in events if when < at)
        self._set_launches(queue, [(g, at if when < at else when) for g, when in events])
        return moved

    async def launch_events_replace(self, *, queue: str, since: datetime,
                                    events: Sequence[tuple[str, datetime]]) -> None:
        kept = [(g, at) for g, at in self._t.launches.get(queue, ()) if at < since]
        self._set_launches(queue, [*kept, *events])

    def _set_launches(self, queue: str, events: list[tuple[str, datetime]]) -> None:
        if events:
            self._t.launches[queue] = events
        else:
            self._t.launches.pop(queue, None)

    # -- step 3: persisting the batch ------------------------------------------------------

    async def persist_batch(self, *, changes: Sequence[Change], owner: str, now: datetime,
                            inbox: Sequence[tuple[int, InboxOutcome]] = ()
                            ) -> set[JobKey]:
        """Each kind of change in turn (archives, requeues, extends), each change only
        where its job still runs under ``owner`` at its attempt; the responses of the
        changes that applied marked applied, then ``inbox``'s rows."""
        applied: set[JobKey] = set()
        marks: list[tuple[int, InboxOutcome]] = []
        for kind in ChangeKind:
            for change in changes:
                job = self._t.live_job(change.queue, change.id)
                if (change.kind is not kind or job is None or job.status is not RUNNING
                        or job.owner != owner or job.attempt != change.attempt):
                    continue
                self._apply(job, change, now)
                applied.add(job.key)
                marks.extend((i, InboxOutcome.APPLIED) for i in change.inbox_ids)
        self._t.mark([*marks, *inbox], now)
        return applied

    def _apply(self, job: Job, change: Change, now: datetime) -> None:
        t = self._t
        if change.kind is ChangeKind.EXTEND:
            t.put_live(job.evolve(deadline=change.deadline, updated_at=now))
            return
        t.record_change(change, now)
        if change.kind is ChangeKind.ARCHIVE:
            t.drop_live(job.queue, job.id)
            t.archive(job.evolve(status=JobState(change.status or "failed"),
                                 result=copied(change.result), error=copied(change.error),
                                 updated_at=now, finished_at=now))
            return
        # a throttled try is given back (its attempt not spent) under a new token
        t.put_live(job.evolve(
            status=QUEUED, run_at=change.run_at,
            data=job.data if change.data is None else copied(change.data),
            error=copied(change.error), updated_at=now, owner=None, deadline=None,
            launch_confirmed=False,
            correlation_key=job.correlation_key if job.correlation_fixed else None,
            attempt=job.attempt - (1 if change.give_back else 0),
            token=job.token if change.token is None else change.token))

    async def job_archive_ran_many(self, *, queue: str, changes: Sequence[Change],
                                   owner: str, now: datetime,
                                   heartbeat_seconds: float | None) -> set[JobKey]:
        """In one step: each job still queued at the attempt before its change's is
        archived as claimed by ``owner`` at ``now`` and ended, its try recorded."""
        t = self._t
        applied: set[JobKey] = set()
        marks: list[tuple[int, InboxOutcome]] = []
        for change in changes:
            job = t.live_job(change.queue, change.id)
            if job is None or job.status is not QUEUED or job.attempt != change.attempt - 1:
                continue
            key = (job.correlation_key if job.correlation_fixed
                   else generated_key(job.token, change.attempt))
            t.drop_live(job.queue, job.id)
            t.archive(job.evolve(
                status=JobState(change.status or "failed"), attempt=change.attempt,
                launched_at=now, deadline=_deadline(job, now, heartbeat_seconds), owner=owner,
                launch_confirmed=True, correlation_key=key, result=copied(change.result),
                error=copied(change.error), updated_at=now, finished_at=now))
            t.record_try(job.queue, job.id, attempt=change.attempt, key=key, launched_at=now,
                         finished_at=now, outcome=change.outcome or "unknown",
                         error=change.error, response=change.response)
            applied.add(job.key)
            marks.extend((i, InboxOutcome.APPLIED) for i in change.inbox_ids)
        t.mark(marks, now)
        return applied

    # -- why a job waits, and counts ----------------------------------------------------------

    async def job_standing(self, *, job: Job, now: datetime, ordering: Ordering, limit: int,
                           key_mode: str = "strict") -> JobStanding:
        jobs = self._t.live.get(job.queue, {})
        running: dict[tuple[bool, str | None], int] = {}
        for j in jobs.values():
            if j.status is RUNNING:
                running[(j.critical, j.group_key)] = running.get((j.critical, j.group_key),
                                                                 0) + j.weight
        key_ahead = None
        if job.ordering_key is not None:
            relaxed = key_mode == RELAXED
            same = (jobs[i] for i in self._t.ordering.get((job.queue, job.ordering_key), ()))
            holding = [k for k in same if k.id != job.id and _holds_back(k, job, now, relaxed)]
            if holding:
                key_ahead = min(holding, key=lambda k: (k.key_order_at is not None,
                                                        k.key_order_at, k.id)).id
        key = order_key(ordering is Ordering.TIME_THEN_PRIORITY)
        mine = key(job)
        ahead = sum(1 for j in self._queued(job.queue) if j.run_at <= now and key(j) < mine)
        return JobStanding(running=running, key_ahead=key_ahead, ahead=min(ahead, limit))

    async def _queue_counts(self, now: datetime) -> dict[str, QueueCounts]:
        counts: dict[str, QueueCounts] = {}
        for queue, jobs in self._t.live.items():
            queued = due = running = weight = 0
            oldest: datetime | None = None
            for job in jobs.values():
                if job.status is RUNNING:
                    running, weight = running + 1, weight + job.weight
                elif job.status is QUEUED:
                    queued += 1
                    if job.run_at <= now:
                        due += 1
                        oldest = job.run_at if oldest is None else min(oldest, job.run_at)
            counts[queue] = (queued, due, running, weight, oldest)
        return counts

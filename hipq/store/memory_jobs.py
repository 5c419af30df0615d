"""The memory store's jobs outside the reconcile loop's steps: enqueue (idempotent
per (queue, id), unique live correlation keys, merging queues), reads of jobs
live and archived, and queued jobs moved or ended without a launch. A base of
:class:`~hipq.store.memory.MemoryStore`; see :mod:`hipq.store.memory_tables`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from hipq.jobs import Job, JobState, Ordering, expired_error
from hipq.store.driver import JobKey
from hipq.store.memory_tables import QUEUED, RUNNING, MemoryBase
from hipq.store.records import InsertOutcome, InsertStatus
from hipq.store.rows import insert_outcome, merged_into, merged_outcome

_NEVER = datetime.min.replace(tzinfo=UTC)  # a job without key_order_at: before any other


def _snapshot(job: Job | None) -> Job | None:
    return None if job is None else job.snapshot()


class MemoryJobs(MemoryBase):
    """Enqueue, reads of jobs, and queued jobs moved or ended."""

    # -- enqueue -----------------------------------------------------------------------

    async def _insert_jobs(self, jobs: Sequence[Job]) -> dict[JobKey, InsertOutcome]:
        """Jobs of distinct (queue, id), in order: a job whose id is stored (live or
        archived) is judged against it; one whose fixed correlation key a live job
        holds (one inserted before it in the call too) is not inserted."""
        t = self._t
        inserted: set[JobKey] = set()
        existing: dict[JobKey, Job] = {}
        for job in jobs:
            found = t.stored(job.queue, job.id)
            if found is not None:
                existing[job.key] = found.snapshot()
            elif not t.key_taken(job.correlation_key, job.key):
                t.put_live(job.snapshot() if job.finished_at is None
                           else job.evolve(finished_at=None).snapshot())
                inserted.add(job.key)
        return {job.key: insert_outcome(job, inserted, existing) for job in jobs}

    async def job_merge(self, job: Job) -> InsertOutcome:
        t = self._t
        merged = t.merged.get(job.key)
        if merged is not None:  # a repeat of a job merged into another
            into_id, body_hash = merged
            return merged_outcome(job, body_hash, _snapshot(t.stored(job.queue, into_id)))
        found = t.stored(job.queue, job.id)
        if found is not None:
            return insert_outcome(job, set(), {job.key: found.snapshot()})
        host = self._merge_host(job)
        if host is None:
            return (await self._insert_jobs([job]))[job.key]
        into = merged_into(host, job)
        t.put_live(into.snapshot())
        t.merged[job.key] = (into.id, job.body_hash)
        return InsertOutcome(id=job.id, status=InsertStatus.CREATED, job=into.snapshot())

    def _merge_host(self, job: Job) -> Job | None:
        """The newest still-queued, never-launched job of ``job``'s ordering key."""
        if job.ordering_key is None:
            return None
        jobs = self._t.live.get(job.queue, {})
        hosts = [jobs[i] for i in self._t.ordering.get((job.queue, job.ordering_key), ())]
        return max((h for h in hosts if h.status is QUEUED and h.attempt == 0),
                   key=lambda h: (h.key_order_at or _NEVER, h.id), default=None)

    # -- reading jobs --------------------------------------------------------------------

    async def job_get(self, queue: str, job_id: str) -> Job | None:
        t = self._t
        job = t.stored(queue, job_id)
        merged = t.merged.get((queue, job_id)) if job is None else None
        if merged is not None:
            job = t.stored(queue, merged[0])
        return _snapshot(job)

    async def job_list_archived(self, *, queue: str | None = None, status: str | None = None,
                                limit: int = 100,
                                after: tuple[datetime, str, str] | None = None) -> list[Job]:
        def sort_key(job: Job) -> tuple[Any, ...]:
            return (job.finished_at, job.queue, job.id)

        found = [j for j in self._t.archived.values()
                 if (not queue or j.queue == queue) and (not status or j.status == status)
                 and (after is None or sort_key(j) < after)]
        found.sort(key=sort_key, reverse=True)
        return [j.snapshot() for j in found[:limit]]

    async def job_list_live(self, *, queue: str, state: str, ordering: Ordering,
                            limit: int, after: Sequence[Any] | None = None) -> list[Job]:
        def sort_key(job: Job) -> tuple[Any, ...]:
            if state == JobState.RUNNING.value:
                return (job.launched_at, job.id)
            if ordering is Ordering.TIME_THEN_PRIORITY:
                return (job.run_at, job.priority, job.id)
            return (job.priority, job.run_at, job.id)

        status = RUNNING if state == JobState.RUNNING.value else QUEUED
        bound = None if after is None else tuple(after)
        found = [j for j in self._t.live.get(queue, {}).values()
                 if j.status is status and (bound is None or sort_key(j) > bound)]
        found.sort(key=sort_key)
        return [j.snapshot() for j in found[:limit]]

    async def job_load_running(self, *, queue: str, ids: Sequence[str] | None = None,
                               after_id: str | None = None,
                               limit: int | None = None) -> list[Job]:
        jobs = self._t.live.get(queue, {})
        wanted = jobs if ids is None else {i: jobs[i] for i in ids if i in jobs}
        found = sorted((j for j in wanted.values() if j.status is RUNNING
                        and (after_id is None or j.id > after_id)), key=lambda j: j.id)
        return [j.snapshot() for j in found[:limit]]

    async def job_keys_lookup(self, keys: Sequence[str]) -> dict[str, Job]:
        t = self._t
        found = {key: t.keys[key] for key in keys if key in t.keys}
        return {key: t.live[queue][job_id].snapshot() for key, (queue, job_id) in found.items()}

    # -- queued jobs moved or ended ------------------------------------------------------

    async def job_adopt_running(self, *, queue: str, owner: str, now: datetime) -> int:
        running = [j for j in self._t.live.get(queue, {}).values() if j.status is RUNNING]
        for job in running:
            self._t.put_live(job.evolve(owner=owner, updated_at=now))
        return len(running)

    async def job_reschedule_many(self, *, queue: str, run_ats: dict[str, datetime],
                                  now: datetime) -> int:
        moved = 0
        for job_id, run_at in run_ats.items():
            job = self._t.live_job(queue, job_id)
            if job is not None and job.status is QUEUED:
                self._t.put_live(job.evolve(run_at=run_at, updated_at=now))
                moved += 1
        return moved

    async def job_archive_queued_many(self, *, queue: str, ends: dict[str, tuple[str, Any]],
                                      now: datetime) -> list[Job]:
        ended = []
        for job_id, (status, error) in ends.items():
            job = self._t.live_job(queue, job_id)
            if job is not None and job.status is QUEUED:
                ended.append(self._t.archive_queued(job, status, error, now).snapshot())
        return ended

    async def job_expired_sweep(self, *, now: datetime, limit: int) -> list[Job]:
        t = self._t
        due = [job for queue, job_id in t.expiring
               if (job := t.live[queue][job_id]).status is QUEUED
               and job.expires_at is not None and job.expires_at <= now]
        due.sort(key=lambda j: (j.expires_at, j.queue, j.id))
        error = expired_error().to_json()
        return [t.archive_queued(job, JobState.EXPIRED.value, error, now).snapshot()
                for job in due[:limit]]

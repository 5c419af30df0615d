"""What both drivers share, and nothing else: the translation of driver errors (by
the exception classes each driver names), the cache of queue settings, and the logic
around their statements that does not depend on the database (deduplicating an
enqueue, the shape of a due-jobs fetch, assembling queue stats, checking the schema
version). No SQLAlchemy and no driver is imported here.

Nothing here writes SQL. Each driver writes all of its own, in one style:
:mod:`hipq.store.sqlite` as SQLAlchemy Core statements on an engine
(:class:`hipq.store.common.StoreBase`), :mod:`hipq.store.postgres` as the named
blocks of ``postgres.sql`` run on an asyncpg pool. Both make their schema from the
numbered files of ``hipq/store/migrations/`` (:func:`hipq.store.versions.pending`).
The store in memory (:mod:`hipq.store.memory`, a test double) builds on this too,
its statements Python over dicts.

Every method is one short transaction or one statement; batch methods are named
``*_many``. Updates of running jobs are guarded in their ``WHERE`` (status, attempt,
owner) so a repeat or a race changes nothing. Driver exceptions are translated to
:mod:`hipq.errors` at this boundary (:meth:`DriverBase._translated`).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, ClassVar

from hipq.errors import SchemaError, StoreConflict, StoreError, TransientStoreError
from hipq.jobs import Job, JobState, Ordering, cancelled_error
from hipq.store.due import DueShape
from hipq.store.listing import cut_job
from hipq.store.records import (
    Change,
    InboxOutcome,
    InsertOutcome,
    ListedJob,
    QueueRecord,
    QueueStats,
)
from hipq.store.rows import CACHE_SIZE, queue_record, repeat_outcome
from hipq.store.versions import SCHEMA_VERSION

log = logging.getLogger(__name__)

JobKey = tuple[str, str]  # (queue, id)
# a queue's counts: queued, due, running, running weight, oldest due run_at
QueueCounts = tuple[int, int, int, int, datetime | None]
VERSION_KEY = "schema_version"  # the key of the schema version in hipq_meta


class DriverBase(abc.ABC):
    """The shared half of a driver; see the module docstring."""

    dialect: ClassVar[str]  # "postgresql", "sqlite" or "memory"
    supports_row_locks: ClassVar[bool]  # SELECT ... FOR UPDATE (else: a single writer)
    supports_reads_beside_writes: ClassVar[bool]  # a pool: a read waits on no write
    supports_notify: ClassVar[bool]  # LISTEN/NOTIFY across processes
    # driver errors that mean "the database is unreachable: try again" (the pool is reset)
    _transient: tuple[type[BaseException], ...] = (OSError, ConnectionError)
    # driver errors of a constraint that refused a write
    _conflicts: tuple[type[BaseException], ...] = ()
    # any other error the driver raises
    _errors: tuple[type[BaseException], ...] = ()

    def __init__(self) -> None:
        self._queues: dict[str, tuple[tuple[Any, ...], QueueRecord]] = {}

    # -- errors ----------------------------------------------------------------------

    @asynccontextmanager
    async def _translated(self) -> AsyncIterator[None]:
        """Driver errors become :mod:`hipq.errors` at this boundary."""
        try:
            yield
        except self._transient as exc:
            await self._drop_pool()
            raise TransientStoreError(f"database unavailable: {exc}") from exc
        except self._errors as exc:
            if self._connection_lost(exc):
                raise TransientStoreError(f"database connection lost: {exc}") from exc
            raise self._translate(exc) from exc

    def _connection_lost(self, exc: BaseException) -> bool:
        """Whether a driver error (of ``_errors``) says the connection is gone, so
        that trying again may work (the pool has already dropped it)."""
        return False

    def _translate(self, exc: BaseException) -> StoreError:
        """A driver error as one of ours: its kind and the database's first line of
        explanation, never the statement or its parameters."""
        cause = getattr(exc, "orig", None) or exc
        reason = (str(cause).strip().splitlines() or [""])[0][:300]
        if isinstance(exc, self._conflicts) or isinstance(cause, self._conflicts):
            return StoreConflict(f"the database refused the write: {reason}")
        return StoreError(f"database error ({type(cause).__name__}): {reason}")

    @abc.abstractmethod
    async def _drop_pool(self) -> None:
        """After a connection error: the pooled connections may all be dead (a
        database restart), so start over with fresh ones rather than fail once per
        connection. Never raises."""

    # -- lifecycle -------------------------------------------------------------------

    @abc.abstractmethod
    async def close(self) -> None:
        """Close the pool."""

    @abc.abstractmethod
    def checked_out(self) -> int:
        """How many pooled connections are checked out now (0 between calls: more
        is a leak; the test fixtures check it)."""

    async def check_schema(self) -> None:
        try:
            version = await self._read_version()
        except TransientStoreError:
            raise
        except StoreError:
            version = None
        if version != SCHEMA_VERSION:
            raise SchemaError(f"database schema is at version {version}, expected "
                              f"{SCHEMA_VERSION}: run 'hipq migrate'")

    @abc.abstractmethod
    async def _read_version(self) -> int | None:
        """The schema version recorded in the database (None: none recorded)."""

    # -- queues ----------------------------------------------------------------------

    async def queue_list(self) -> list[QueueRecord]:
        return [self._queue_cached(row) for row in await self._queue_rows()]

    @abc.abstractmethod
    async def _queue_rows(self) -> Sequence[Any]:
        """Every row of ``queues`` by id, as mappings."""

    def _queue_cached(self, row: Any) -> QueueRecord:
        """The record of a queue row, made again (its spec too) only when the row
        changed."""
        version = (row["config"], row["paused"], row["updated_at"])
        cached = self._queues.get(row["id"])
        if cached is not None and cached[0] == version:
            return cached[1]
        record = queue_record(row)
        if len(self._queues) >= CACHE_SIZE:
            self._queues.clear()
        self._queues[row["id"]] = (version, record)
        return record

    # -- reading jobs ------------------------------------------------------------------

    @abc.abstractmethod
    async def job_get(self, queue: str, job_id: str) -> Job | None:
        """The job wherever it is (:meth:`hipq.store.base.Store.job_get`)."""

    async def job_get_listed(self, queue: str, job_id: str, *,
                             value_chars: int) -> ListedJob | None:
        """:meth:`job_get` with the job's large values cut (:mod:`hipq.store.listing`).
        Here the job is read whole and cut in memory, for a store that holds its jobs
        there; the SQL drivers cut in their statements: never read whole."""
        job = await self.job_get(queue, job_id)
        return None if job is None else cut_job(job, value_chars)

    # -- enqueue -----------------------------------------------------------------------

    async def job_insert_many(self, new_jobs: Sequence[Job]) -> list[InsertOutcome]:
        keys = [(job.queue, job.id) for job in new_jobs]
        if len(set(keys)) == len(keys):  # the usual batch: every (queue, id) once
            outcomes = await self._insert_jobs(new_jobs)
            return [outcomes[key] for key in keys]
        firsts: dict[JobKey, Job] = {}
        for key, job in zip(keys, new_jobs, strict=True):
            firsts.setdefault(key, job)
        outcomes = await self._insert_jobs(list(firsts.values()))
        return [outcomes[key] if firsts[key] is job else repeat_outcome(job, outcomes[key])
                for key, job in zip(keys, new_jobs, strict=True)]

    @abc.abstractmethod
    async def _insert_jobs(self, jobs: Sequence[Job]) -> dict[JobKey, InsertOutcome]:
        """Insert jobs of distinct (queue, id); each one's outcome by its key."""

    # -- the reconcile loop ---------------------------------------------------------------

    async def job_fetch_due(self, *, queue: str, now: datetime, limit: int,
                            ordering: Ordering, critical_only: bool = False,
                            group: str | None = None,
                            default_group_excluding: Sequence[str] | None = None,
                            key_mode: str = "strict") -> list[Job]:
        excluding = None if default_group_excluding is None else tuple(default_group_excluding)
        return await self._fetch_due(DueShape(
            queue=queue, ordering=ordering, critical_only=critical_only, group=group,
            default_group_excluding=excluding, key_mode=key_mode), now=now, limit=limit)

    async def job_fetch_due_after(self, *, queue: str, now: datetime, limit: int,
                                  ordering: Ordering, after: Job, ran: AbstractSet[str],
                                  key_mode: str = "strict") -> list[Job] | None:
        """None: this driver reads from the start (PostgreSQL's reads after)."""
        return None

    @abc.abstractmethod
    async def _fetch_due(self, shape: DueShape, *, now: datetime, limit: int) -> list[Job]:
        """At most ``limit`` due jobs of ``shape`` (see :class:`DueShape`)."""

    @abc.abstractmethod
    async def job_archive_queued_many(self, *, queue: str, ends: dict[str, tuple[str, Any]],
                                      now: datetime) -> list[Job]:
        """See :meth:`hipq.store.base.Store.job_archive_queued_many`."""

    @abc.abstractmethod
    async def job_archive_ran_many(self, *, queue: str, changes: Sequence[Change],
                                   owner: str, now: datetime,
                                   heartbeat_seconds: float | None) -> set[tuple[str, str]]:
        """See :meth:`hipq.store.base.Store.job_archive_ran_many`: each driver claims
        and ends the tries in one statement or one transaction."""

    @abc.abstractmethod
    async def job_mark_running_many(self, *, queue: str, ids: Sequence[str], now: datetime,
                                    owner: str, heartbeat_seconds: float | None,
                                    rate_groups: Mapping[str, str] | None = None,
                                    known: Mapping[str, Job] | None = None) -> list[Job]:
        """See :meth:`hipq.store.base.Store.job_mark_running_many`."""

    @abc.abstractmethod
    async def job_confirm_launch_many(self, *, keys: Sequence[tuple[str, str, int]],
                                      owner: str) -> int:
        """See :meth:`hipq.store.base.Store.job_confirm_launch_many`."""

    @abc.abstractmethod
    async def persist_batch(self, *, changes: Sequence[Change], owner: str, now: datetime,
                            inbox: Sequence[tuple[int, InboxOutcome]] = ()
                            ) -> set[tuple[str, str]]:
        """See :meth:`hipq.store.base.Store.persist_batch`."""

    async def job_cancel_queued(self, *, queue: str, job_id: str, now: datetime) -> Job | None:
        ended = await self.job_archive_queued_many(
            queue=queue, ends={job_id: (JobState.CANCELLED.value, cancelled_error().to_json())},
            now=now)
        return ended[0] if ended else None

    # -- stats -------------------------------------------------------------------------

    async def queue_stats(self, *, now: datetime) -> list[QueueStats]:
        counts = await self._queue_counts(now)
        out = []
        for record in await self.queue_list():
            queued, due, running, weight, oldest = counts.get(record.id, (0, 0, 0, 0, None))
            out.append(QueueStats(
                queue=record.id, paused=record.paused, queued=queued, due=due,
                running=running, running_weight=weight,
                oldest_due_age_seconds=None if oldest is None
                else max((now - oldest).total_seconds(), 0.0),
                concurrency=record.spec.concurrency))
        return out

    @abc.abstractmethod
    async def _queue_counts(self, now: datetime) -> dict[str, QueueCounts]:
        """The jobs of each queue that has any, counted as of ``now``."""

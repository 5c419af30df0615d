"""What both drivers run the same way: SQLAlchemy Core statements over one engine.

:class:`SQLAlchemyStore` implements the part of the :class:`~hipq.store.base.Store`
protocol whose statements are identical on PostgreSQL and SQLite (queues, leases,
reads, housekeeping), and leaves the hot paths of the reconcile loop and enqueue
to its subclasses (:mod:`hipq.store.sqlite`, :mod:`hipq.store.postgres`). The few
dialect differences in the shared statements are class attributes (the INSERT
constructor for upserts, whether rows can be locked), chosen by the subclass.

Every method is one short transaction; batch methods are named ``*_many``. Updates
of running jobs are guarded in their ``WHERE`` (status, attempt, owner) so a
repeat or a race changes nothing. Driver exceptions are translated to
:mod:`hipq.errors` at this boundary (:meth:`SQLAlchemyStore._translated`).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hipq.config import QueueConfig
from hipq.errors import SchemaError, StoreConflict, StoreError, TransientStoreError
from hipq.jobs import Attempt, Job, JobState, Ordering, cancelled_error, expired_error
from hipq.store import schema as s
from hipq.store.due import DueShape
from hipq.store.history import read_history, record_late
from hipq.store.listing import listed_response, unmatched_query
from hipq.store.records import (
    InboxRow,
    InsertOutcome,
    InsertStatus,
    JobHistory,
    ListedResponse,
    QueueRecord,
    QueueStats,
)
from hipq.store.rows import (
    CACHE_SIZE,
    INSERT_CHUNK,
    chunks,
    inbox_row,
    insert_outcome,
    job_from_row,
    job_values,
    queue_record,
    repeat_outcome,
)

log = logging.getLogger(__name__)

JobKey = tuple[str, str]  # (queue, id)
IDS_CHUNK = 500  # ids per statement of a read by id (SQLite allows 999 parameters)


class SQLAlchemyStore(abc.ABC):
    """The shared half of a SQL driver; see the module docstring."""

    dialect: ClassVar[str]  # "postgresql" or "sqlite"
    supports_row_locks: ClassVar[bool]  # SELECT ... FOR UPDATE (else: a single writer)
    _insert_into: ClassVar[Callable[[sa.Table], Any]]  # the dialect's ``insert``
    # driver errors that mean "the database is unreachable: try again"
    _transient: ClassVar[tuple[type[BaseException], ...]] = (OperationalError, OSError,
                                                             ConnectionError)
    # driver errors of a constraint that refused a write
    _conflicts: ClassVar[tuple[type[BaseException], ...]] = (IntegrityError,)
    # any other error the driver raises
    _errors: ClassVar[tuple[type[BaseException], ...]] = (DBAPIError,)

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._queues: dict[str, tuple[tuple[Any, ...], QueueRecord]] = {}

    # -- connections and errors ----------------------------------------------------

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[AsyncConnection]:
        async with self._translated(), self.engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def _translated(self) -> AsyncIterator[None]:
        """Driver errors become :mod:`hipq.errors` at this boundary."""
        try:
            yield
        except self._transient as exc:
            await self._drop_pool()
            raise TransientStoreError(f"database unavailable: {exc}") from exc
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise TransientStoreError(f"database connection lost: {exc}") from exc
            raise self._translate(exc) from exc
        except self._errors as exc:
            raise self._translate(exc) from exc

    def _translate(self, exc: BaseException) -> StoreError:
        """A driver error as one of ours: its kind and the database's first line of
        explanation, never the statement or its parameters."""
        cause = getattr(exc, "orig", None) or exc
        reason = (str(cause).strip().splitlines() or [""])[0][:300]
        if isinstance(exc, self._conflicts) or isinstance(cause, self._conflicts):
            return StoreConflict(f"the database refused the write: {reason}")
        return StoreError(f"database error ({type(cause).__name__}): {reason}")

    async def _drop_pool(self) -> None:
        """After a connection error outside SQLAlchemy's sight (statements sent
        straight to the driver): the pooled connections may all be dead (a database
        restart), so start over with a new pool rather than fail once per connection."""
        try:
            await self.engine.dispose(close=False)
        except Exception:
            log.debug("could not reset the connection pool", exc_info=True)

    def _insert(self, table: sa.Table) -> Any:
        """An INSERT into ``table`` in the dialect's construct, which has ON CONFLICT."""
        return type(self)._insert_into(table)

    def _locked(self, stmt: sa.Select[Any]) -> sa.Select[Any]:
        """``stmt`` locking the rows it reads, where the database locks rows."""
        return stmt.with_for_update() if self.supports_row_locks else stmt

    # -- lifecycle -------------------------------------------------------------------

    async def close(self) -> None:
        await self.engine.dispose()

    async def ping(self) -> None:
        async with self._tx() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def migrate(self) -> int:
        async with self._tx() as conn:
            await self._migration_lock(conn)
            current = await self._version(conn)
            if current is not None and current > s.SCHEMA_VERSION:
                raise SchemaError(f"database schema version {current} is newer than this "
                                  f"hipq ({s.SCHEMA_VERSION}); upgrade hipq")
            await conn.run_sync(s.metadata.create_all)
            for version in sorted(s.UPGRADES):
                if current is not None and current < version:
                    for step in s.UPGRADES[version]:
                        await self._upgrade(conn, step)
            stmt = self._insert(s.meta).values(key="schema_version",
                                               value=str(s.SCHEMA_VERSION))
            await conn.execute(stmt.on_conflict_do_update(
                index_elements=["key"], set_={"value": str(s.SCHEMA_VERSION)}))
        return s.SCHEMA_VERSION

    @staticmethod
    async def _upgrade(conn: AsyncConnection, step: str | s.AddColumn) -> None:
        if isinstance(step, s.AddColumn):
            table = step.table
            columns = await conn.run_sync(
                lambda c: {col["name"] for col in sa.inspect(c).get_columns(table)})
            statement = step.statement(columns)
            if statement is None:
                return
            step = statement
        await conn.exec_driver_sql(step)

    async def _migration_lock(self, conn: AsyncConnection) -> None:
        """Serialize concurrent migrations (held until the transaction ends); SQLite
        has a single writer already."""
        return

    async def check_schema(self) -> None:
        try:
            async with self._tx() as conn:
                version = await self._version(conn)
        except TransientStoreError:
            raise
        except StoreError:
            version = None
        if version != s.SCHEMA_VERSION:
            raise SchemaError(f"database schema is at version {version}, expected "
                              f"{s.SCHEMA_VERSION}: run 'hipq migrate'")

    @staticmethod
    async def _version(conn: AsyncConnection) -> int | None:
        has_meta = await conn.run_sync(lambda c: sa.inspect(c).has_table("hipq_meta"))
        if not has_meta:
            return None
        value = await conn.scalar(sa.select(s.meta.c.value).where(
            s.meta.c.key == "schema_version"))
        return int(value) if value is not None else None

    async def meta_get_or_set(self, key: str, value: str) -> str:
        async with self._tx() as conn:
            await conn.execute(self._insert(s.meta).values(key=key, value=value)
                               .on_conflict_do_nothing(index_elements=["key"]))
            stored = await conn.scalar(sa.select(s.meta.c.value).where(s.meta.c.key == key))
        return str(stored)

    # -- queues ----------------------------------------------------------------------

    async def queue_upsert(self, config: QueueConfig, *, now: datetime) -> bool:
        body = config.model_dump(mode="json", exclude_none=True)
        async with self._tx() as conn:
            existed = await conn.scalar(sa.select(sa.func.count()).select_from(s.queues)
                                        .where(s.queues.c.id == config.id))
            stmt = self._insert(s.queues).values(id=config.id, config=body, paused=config.paused,
                                                 created_at=now, updated_at=now)
            await conn.execute(stmt.on_conflict_do_update(
                index_elements=["id"],
                set_={"config": body, "paused": config.paused, "updated_at": now}))
        return not existed

    async def queue_get(self, queue_id: str) -> QueueRecord | None:
        async with self._tx() as conn:
            row = (await conn.execute(sa.select(s.queues).where(s.queues.c.id == queue_id))).first()
        return None if row is None else queue_record(row._mapping)

    async def queue_list(self) -> list[QueueRecord]:
        return [self._queue_cached(row) for row in await self._queue_rows()]

    async def _queue_rows(self) -> Sequence[Any]:
        """Every row of ``queues`` by id (a driver may read it faster)."""
        async with self._tx() as conn:
            return [r._mapping for r in await conn.execute(
                sa.select(s.queues).order_by(s.queues.c.id))]

    def _queue_cached(self, row: Any) -> QueueRecord:
        """The record of a queue row, re-validated only when the row changed."""
        version = (row["config"], row["paused"], row["updated_at"])
        cached = self._queues.get(row["id"])
        if cached is not None and cached[0] == version:
            return cached[1]
        record = queue_record(row)
        if len(self._queues) >= CACHE_SIZE:
            self._queues.clear()
        self._queues[row["id"]] = (version, record)
        return record

    async def queue_set_paused(self, queue_id: str, paused: bool, *, now: datetime) -> bool:
        async with self._tx() as conn:
            result = await conn.execute(s.queues.update().where(s.queues.c.id == queue_id)
                                        .values(paused=paused, updated_at=now))
        return bool(result.rowcount)

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

    async def job_merge(self, job: Job) -> InsertOutcome:
        t, m = s.jobs, s.merged_jobs
        async with self._tx() as conn:
            known = await self._merged_or_existing(conn, job)
            if known is not None:
                return known
            row = (await conn.execute(self._locked(
                sa.select(t).where(t.c.queue == job.queue, t.c.ordering_key == job.ordering_key,
                                   t.c.status == s.QUEUED, t.c.attempt == 0)
                .order_by(t.c.key_order_at.desc(), t.c.id.desc()).limit(1)))).first()
            if row is not None:
                host = job_from_row(row._mapping)
                payloads = [*host.data.get("payloads", []), *job.data.get("payloads", [])]
                merged = replace(host, data={**host.data, "payloads": payloads},
                                 updated_at=job.created_at)
                await conn.execute(t.update().where(t.c.queue == host.queue, t.c.id == host.id)
                                   .values(data=merged.data, updated_at=merged.updated_at))
                await conn.execute(m.insert().values(queue=job.queue, id=job.id, into_id=host.id,
                                                     body_hash=job.body_hash,
                                                     created_at=job.created_at))
                return InsertOutcome(id=job.id, status=InsertStatus.CREATED, job=merged)
        (outcome,) = await self.job_insert_many([job])
        return outcome

    async def _merged_or_existing(self, conn: AsyncConnection, job: Job) -> InsertOutcome | None:
        """A repeat of ``job``: already merged into another job, or stored itself."""
        m = s.merged_jobs
        row = (await conn.execute(sa.select(m).where(m.c.queue == job.queue,
                                                     m.c.id == job.id))).first()
        if row is not None:
            host = await stored_jobs(conn, s.jobs, [(job.queue, row.into_id)])
            host = host or await stored_jobs(conn, s.archived_jobs, [(job.queue, row.into_id)])
            status = (InsertStatus.EXISTS if row.body_hash == job.body_hash
                      else InsertStatus.CONFLICT)
            return InsertOutcome(id=job.id, status=status, job=next(iter(host.values()), None),
                                 error=None if status is InsertStatus.EXISTS else
                                 f"job {job.id!r} was already merged with a different body")
        found: dict[JobKey, Job] = {}
        for table in (s.jobs, s.archived_jobs):
            found.update(await stored_jobs(conn, table, [job.key]))
        return insert_outcome(job, set(), found) if job.key in found else None

    # -- reading jobs ------------------------------------------------------------------

    async def job_get(self, queue: str, job_id: str) -> Job | None:
        async with self._tx() as conn:
            for target in (job_id, await conn.scalar(sa.select(s.merged_jobs.c.into_id).where(
                    s.merged_jobs.c.queue == queue, s.merged_jobs.c.id == job_id))):
                if target is None:
                    continue
                for table in (s.jobs, s.archived_jobs):
                    row = (await conn.execute(sa.select(table).where(
                        table.c.queue == queue, table.c.id == target))).first()
                    if row is not None:
                        return job_from_row(row._mapping)
        return None

    async def job_attempts(self, queue: str, job_id: str) -> list[Attempt]:
        t = s.job_attempts
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t).where(t.c.queue == queue, t.c.job_id == job_id)
                                      .order_by(t.c.attempt, t.c.id))
            return [Attempt(attempt=r.attempt, launched_at=r.launched_at,
                            finished_at=r.finished_at, outcome=r.outcome, error=r.error,
                            response=r.response) for r in rows]

    async def job_history(self, queue: str, job_id: str, *, limit: int) -> JobHistory:
        async with self._tx() as conn:
            return await read_history(conn, queue, job_id, limit=limit)

    async def job_list_archived(self, *, queue: str | None = None, status: str | None = None,
                                limit: int = 100,
                                after: tuple[datetime, str, str] | None = None) -> list[Job]:
        t = s.archived_jobs
        stmt = sa.select(t).order_by(t.c.finished_at.desc(), t.c.queue.desc(),
                                     t.c.id.desc()).limit(limit)
        if after is not None:
            stmt = stmt.where(sa.tuple_(t.c.finished_at, t.c.queue, t.c.id) < sa.tuple_(
                sa.literal(after[0], s.UTCDateTime), sa.literal(after[1]), sa.literal(after[2])))
        if queue:
            stmt = stmt.where(t.c.queue == queue)
        if status:
            stmt = stmt.where(t.c.status == status)
        async with self._tx() as conn:
            return [job_from_row(r._mapping) for r in await conn.execute(stmt)]

    async def job_load_running(self, *, queue: str, ids: Sequence[str] | None = None,
                               after_id: str | None = None,
                               limit: int | None = None) -> list[Job]:
        t = s.jobs
        stmt = sa.select(t).where(t.c.queue == queue, t.c.status == s.RUNNING).order_by(t.c.id)
        if after_id is not None:
            stmt = stmt.where(t.c.id > after_id)
        if limit is not None:
            stmt = stmt.limit(limit)
        if ids is None:
            async with self._tx() as conn:
                return [job_from_row(r._mapping) for r in await conn.execute(stmt)]
        ids, out = list(ids), list[Job]()
        async with self._tx() as conn:  # in chunks: drivers cap a statement's parameters
            for start in range(0, len(ids), IDS_CHUNK):
                chunk = stmt.where(t.c.id.in_(ids[start:start + IDS_CHUNK]))
                out.extend(job_from_row(r._mapping) for r in await conn.execute(chunk))
        return out

    # -- the reconcile loop ---------------------------------------------------------------
    # Each driver implements the hot paths itself: job_mark_running_many,
    # job_confirm_launch_many, persist_batch, inbox_insert_many, inbox_mark_many,
    # inbox_pending_for_keys and job_keys_lookup (the factory's return type checks
    # that a driver is a whole Store).

    async def job_fetch_due(self, *, queue: str, now: datetime, limit: int,
                            ordering: Ordering, critical_only: bool = False,
                            group: str | None = None,
                            default_group_excluding: Sequence[str] | None = None,
                            key_mode: str = "strict") -> list[Job]:
        excluding = None if default_group_excluding is None else tuple(default_group_excluding)
        return await self._fetch_due(DueShape(
            queue=queue, ordering=ordering, critical_only=critical_only, group=group,
            default_group_excluding=excluding, key_mode=key_mode), now=now, limit=limit)

    @abc.abstractmethod
    async def _fetch_due(self, shape: DueShape, *, now: datetime, limit: int) -> list[Job]:
        """The due jobs of :func:`~hipq.store.due.due_query`."""

    async def jobs_vacuum(self) -> bool:
        return False  # nothing to do unless the driver says otherwise

    async def launch_events_recent(self, *, queue: str, since: datetime) -> dict[str,
                                                                                  list[datetime]]:
        e = s.launch_events
        async with self._tx() as conn:
            await conn.execute(e.delete().where(e.c.queue == queue, e.c.launched_at <= since))
            rows = await conn.execute(sa.select(e.c.group_key, e.c.launched_at)
                                      .where(e.c.queue == queue, e.c.launched_at > since))
            out: dict[str, list[datetime]] = {}
            for row in rows:
                out.setdefault(row.group_key, []).append(row.launched_at)
        return out

    async def launch_events_restamp(self, *, queue: str, at: datetime) -> int:
        e = s.launch_events
        async with self._tx() as conn:
            done = await conn.execute(e.update().where(e.c.queue == queue, e.c.launched_at < at)
                                      .values(launched_at=at))
        return int(done.rowcount or 0)

    async def launch_events_replace(self, *, queue: str, since: datetime,
                                    events: Sequence[tuple[str, datetime]]) -> None:
        e = s.launch_events
        async with self._tx() as conn:
            await conn.execute(e.delete().where(e.c.queue == queue, e.c.launched_at >= since))
            if events:
                await conn.execute(e.insert(), [
                    {"queue": queue, "group_key": group, "launched_at": at}
                    for group, at in events])

    # -- queued and adopted jobs ---------------------------------------------------------

    async def job_adopt_running(self, *, queue: str, owner: str, now: datetime) -> int:
        t = s.jobs
        async with self._tx() as conn:
            result = await conn.execute(t.update().where(
                t.c.queue == queue, t.c.status == s.RUNNING).values(owner=owner, updated_at=now))
        return int(result.rowcount)

    async def job_reschedule_many(self, *, queue: str, run_ats: dict[str, datetime],
                                  now: datetime) -> int:
        if not run_ats:
            return 0
        t = s.jobs
        moved = 0
        # One statement per chunk, not executemany: asyncpg reports no rowcount for that.
        async with self._tx() as conn:
            for chunk in chunks(list(run_ats.items()), INSERT_CHUNK):
                run_at = sa.case(*((t.c.id == i, sa.literal(at, s.UTCDateTime))
                                   for i, at in chunk), else_=t.c.run_at)
                result = await conn.execute(t.update().where(
                    t.c.queue == queue, t.c.id.in_([i for i, _ in chunk]),
                    t.c.status == s.QUEUED).values(run_at=run_at, updated_at=now))
                moved += int(result.rowcount)
        return moved

    async def job_archive_queued_many(self, *, queue: str, ends: dict[str, tuple[str, Any]],
                                      now: datetime) -> list[Job]:
        if not ends:
            return []
        t = s.jobs
        async with self._tx() as conn:
            rows = (await conn.execute(t.delete().where(
                t.c.queue == queue, t.c.id.in_(list(ends)), t.c.status == s.QUEUED)
                .returning(*t.columns))).all()
            archived = [job_from_row(r._mapping).evolve(
                status=JobState(ends[r.id][0]), error=ends[r.id][1], updated_at=now,
                finished_at=now) for r in rows]
            await self._archive_insert(conn, archived)
        return archived

    async def job_expired_sweep(self, *, now: datetime, limit: int) -> list[Job]:
        t = s.jobs
        async with self._tx() as conn:
            keys = (await conn.execute(sa.select(t.c.queue, t.c.id).where(
                t.c.status == s.QUEUED, t.c.expires_at.is_not(None), t.c.expires_at <= now)
                .order_by(t.c.expires_at).limit(limit))).all()
            if not keys:
                return []
            rows = (await conn.execute(t.delete().where(
                sa.tuple_(t.c.queue, t.c.id).in_([tuple(k) for k in keys]),
                t.c.status == s.QUEUED).returning(*t.columns))).all()
            error = expired_error().to_json()
            archived = [job_from_row(r._mapping).evolve(status=JobState.EXPIRED, error=error,
                                                        updated_at=now, finished_at=now)
                        for r in rows]
            await self._archive_insert(conn, archived)
        return archived

    async def job_cancel_queued(self, *, queue: str, job_id: str, now: datetime) -> Job | None:
        ended = await self.job_archive_queued_many(
            queue=queue, ends={job_id: (JobState.CANCELLED.value, cancelled_error().to_json())},
            now=now)
        return ended[0] if ended else None

    async def _archive_insert(self, conn: AsyncConnection, archived: Sequence[Job]) -> None:
        if not archived:
            return
        rows = [{**job_values(j), "finished_at": j.finished_at} for j in archived]
        # executemany: SQLAlchemy compiles the statement once and batches the rows
        # ("insertmanyvalues"), instead of compiling a new N-row VALUES every time.
        await conn.execute(self._insert(s.archived_jobs).on_conflict_do_nothing(), rows)

    # -- the response inbox and late responses -------------------------------------------

    async def inbox_pending_scan(self, *, after_id: int, before: datetime,
                                 limit: int) -> list[InboxRow]:
        t = s.response_inbox
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t).where(
                t.c.applied_at.is_(None), t.c.id > after_id, t.c.received_at < before)
                .order_by(t.c.id).limit(limit))
            return [inbox_row(r._mapping) for r in rows]

    async def inbox_list_unmatched(self, *, limit: int = 100,
                                   after: tuple[datetime, int] | None = None,
                                   value_chars: int = 4096) -> list[ListedResponse]:
        stmt = unmatched_query(limit=limit, after=after, value_chars=value_chars)
        async with self._tx() as conn:
            return [listed_response(r._mapping) for r in await conn.execute(stmt)]

    async def archived_by_attempt_keys(self, keys: Sequence[str]) -> dict[str, tuple[str, str]]:
        if not keys:
            return {}
        a, t = s.job_attempts, s.archived_jobs
        async with self._tx() as conn:
            found = {r.correlation_key: (r.queue, r.job_id) for r in await conn.execute(
                sa.select(a.c.correlation_key, a.c.queue, a.c.job_id)
                .where(a.c.correlation_key.in_(list(keys))))}
            found.update({r.correlation_key: (r.queue, r.id) for r in await conn.execute(
                sa.select(t.c.correlation_key, t.c.queue, t.c.id)
                .where(t.c.correlation_key.in_(list(keys))))})
        return found

    async def attempt_record_late_many(self, rows: Sequence[tuple[str, str, InboxRow]], *,
                                       now: datetime) -> None:
        if not rows:
            return
        async with self._tx() as conn:
            await self._late_lock(conn)
            await record_late(conn, rows, now=now)

    async def _late_lock(self, conn: AsyncConnection) -> None:
        """Serialize the recording of late responses (held until the transaction
        ends), so that the counts it reads stay true until it inserts: no try gets
        more than ``LATE_PER_TRY``. SQLite has a single writer already."""
        return

    # -- leases ------------------------------------------------------------------------

    async def lease_acquire_many(self, *, queues: Sequence[str], owner: str, now: datetime,
                                 seconds: float) -> set[str]:
        if not queues:
            return set()
        t = s.leases
        expires = now + timedelta(seconds=seconds)
        insert = self._insert(t).values([{"queue": q, "owner": owner, "acquired_at": now,
                                           "expires_at": expires} for q in queues])
        stmt = insert.on_conflict_do_update(
            index_elements=["queue"],
            set_={"owner": insert.excluded.owner, "expires_at": insert.excluded.expires_at,
                  "acquired_at": sa.case((t.c.owner == insert.excluded.owner, t.c.acquired_at),
                                         else_=insert.excluded.acquired_at)},
            where=sa.or_(t.c.owner == insert.excluded.owner, t.c.expires_at < now),
        ).returning(t.c.queue)
        async with self._tx() as conn:
            return {r.queue for r in await conn.execute(stmt)}

    async def lease_release_all(self, *, owner: str) -> int:
        async with self._tx() as conn:
            result = await conn.execute(s.leases.delete().where(s.leases.c.owner == owner))
        return int(result.rowcount)

    async def lease_release_many(self, *, queues: Sequence[str], owner: str) -> int:
        if not queues:
            return 0
        t = s.leases
        async with self._tx() as conn:
            result = await conn.execute(t.delete().where(t.c.owner == owner,
                                                         t.c.queue.in_(list(queues))))
        return int(result.rowcount)

    async def lease_list(self) -> dict[str, tuple[str, datetime]]:
        t = s.leases
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t.c.queue, t.c.owner, t.c.expires_at))
            return {r.queue: (r.owner, r.expires_at) for r in rows}

    # -- membership ----------------------------------------------------------------------

    async def daemon_heartbeat(self, *, owner: str, now: datetime,
                               seconds: float) -> list[str]:
        t = s.daemons
        expires = now + timedelta(seconds=seconds)
        insert = self._insert(t).values(owner=owner, started_at=now, heartbeat_at=now,
                                        expires_at=expires)
        stmt = insert.on_conflict_do_update(
            index_elements=["owner"],
            set_={"heartbeat_at": insert.excluded.heartbeat_at,
                  "expires_at": insert.excluded.expires_at})
        async with self._tx() as conn:
            await conn.execute(stmt)
            await conn.execute(t.delete().where(t.c.expires_at < now - timedelta(
                seconds=seconds)))  # long gone: nobody needs their row
            rows = await conn.execute(sa.select(t.c.owner).where(t.c.expires_at >= now)
                                      .order_by(t.c.owner))
            return [r.owner for r in rows]

    async def daemon_leave(self, *, owner: str) -> None:
        async with self._tx() as conn:
            await conn.execute(s.daemons.delete().where(s.daemons.c.owner == owner))

    # -- stats and housekeeping ----------------------------------------------------------

    async def queue_stats(self, *, now: datetime) -> list[QueueStats]:
        t = s.jobs
        queued = sa.func.sum(sa.case((t.c.status == s.QUEUED, 1), else_=0))
        due = sa.func.sum(sa.case((sa.and_(t.c.status == s.QUEUED, t.c.run_at <= now), 1),
                                  else_=0))
        running = sa.func.sum(sa.case((t.c.status == s.RUNNING, 1), else_=0))
        weight = sa.func.sum(sa.case((t.c.status == s.RUNNING, t.c.weight), else_=0))
        oldest = sa.func.min(sa.case((sa.and_(t.c.status == s.QUEUED, t.c.run_at <= now),
                                      t.c.run_at), else_=None))
        stmt = sa.select(t.c.queue, queued, due, running, weight,
                         sa.type_coerce(oldest, s.UTCDateTime)).group_by(t.c.queue)
        async with self._tx() as conn:
            counts = {r[0]: r for r in await conn.execute(stmt)}
        out = []
        for record in await self.queue_list():
            c = counts.get(record.id)
            oldest_at = c[5] if c is not None else None
            out.append(QueueStats(
                queue=record.id, paused=record.paused,
                queued=int(c[1] or 0) if c else 0, due=int(c[2] or 0) if c else 0,
                running=int(c[3] or 0) if c else 0, running_weight=int(c[4] or 0) if c else 0,
                oldest_due_age_seconds=None if oldest_at is None
                else max((now - oldest_at).total_seconds(), 0.0),
                concurrency=record.config.concurrency))
        return out

    async def inbox_counts(self) -> dict[str, int]:
        t = s.response_inbox
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t.c.outcome, sa.func.count())
                                      .group_by(t.c.outcome))
            return {str(r[0] or "pending"): int(r[1]) for r in rows}

    async def job_list_live(self, *, queue: str, state: str, ordering: Ordering,
                            limit: int, after: Sequence[Any] | None = None) -> list[Job]:
        t = s.jobs
        keys: tuple[sa.ColumnElement[Any], ...]
        if state == JobState.RUNNING.value:
            keys = (t.c.launched_at, t.c.id)
        elif ordering is Ordering.TIME_THEN_PRIORITY:
            keys = (t.c.run_at, t.c.priority, t.c.id)
        else:
            keys = (t.c.priority, t.c.run_at, t.c.id)
        status = s.RUNNING if state == JobState.RUNNING.value else s.QUEUED
        stmt = sa.select(t).where(t.c.queue == queue, t.c.status == status)
        if after is not None:
            bound = [sa.literal(v, s.UTCDateTime) if isinstance(v, datetime) else sa.literal(v)
                     for v in after]
            stmt = stmt.where(sa.tuple_(*keys) > sa.tuple_(*bound))
        stmt = stmt.order_by(*keys).limit(limit)
        async with self._tx() as conn:
            return [job_from_row(r._mapping) for r in await conn.execute(stmt)]

    async def archive_prune(self, *, before: datetime, limit: int) -> int:
        t, a, i = s.archived_jobs, s.job_attempts, s.response_inbox
        async with self._tx() as conn:
            keys = [tuple(k) for k in await conn.execute(
                sa.select(t.c.queue, t.c.id).where(t.c.finished_at < before)
                .order_by(t.c.finished_at).limit(limit))]
            if keys:
                await conn.execute(a.delete().where(
                    sa.tuple_(a.c.queue, a.c.job_id).in_(keys)))
                await conn.execute(t.delete().where(sa.tuple_(t.c.queue, t.c.id).in_(keys)))
            applied = sa.select(i.c.id).where(i.c.applied_at < before).order_by(
                i.c.applied_at).limit(limit).scalar_subquery()
            inbox = await conn.execute(i.delete().where(i.c.id.in_(applied)))
        return max(len(keys), int(inbox.rowcount))


async def stored_jobs(conn: AsyncConnection, table: sa.Table,
                      keys: Sequence[JobKey]) -> dict[JobKey, Job]:
    """The jobs of ``table`` (``jobs`` or ``archived_jobs``) with these (queue, id)."""
    if not keys:
        return {}
    rows = await conn.execute(sa.select(table).where(
        sa.tuple_(table.c.queue, table.c.id).in_(keys)))
    return {(r.queue, r.id): job_from_row(r._mapping) for r in rows}

"""The one SQL store, for PostgreSQL (asyncpg) and SQLite (aiosqlite).

Every method is one short transaction; batch methods are named ``*_many`` and
write with one statement per step. Updates of running jobs are guarded in their
``WHERE`` (status, attempt, owner) so a repeat or a race changes nothing.
Dialect differences are flags chosen once at construction: PostgreSQL claims rows
with ``FOR UPDATE SKIP LOCKED``; SQLite is a single writer (``BEGIN IMMEDIATE``).
Driver exceptions are translated to :mod:`hipq.errors` at this boundary.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from hipq.config import QueueConfig
from hipq.errors import SchemaError, StoreError, TransientStoreError
from hipq.frozen import evolver
from hipq.jobs import Attempt, Job, JobState, Ordering, row_reader
from hipq.store import pg
from hipq.store import schema as s
from hipq.store.records import (
    Change,
    ChangeKind,
    InboxOutcome,
    InboxRow,
    InsertOutcome,
    InsertStatus,
    QueueRecord,
    QueueStats,
    Response,
)

log = logging.getLogger(__name__)

try:  # errors raised by statements sent straight to asyncpg (hipq.store.pg), as
    # asyncpg raises them or as SQLAlchemy's adapter translates them
    import asyncpg  # type: ignore[import-untyped]
    from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_dbapi as _adapted

    _DRIVER_TRANSIENT: tuple[type[BaseException], ...] = (
        asyncpg.PostgresConnectionError, asyncpg.InterfaceError, asyncpg.InternalClientError,
        asyncpg.CannotConnectNowError, asyncpg.AdminShutdownError,
        _adapted.InterfaceError, _adapted.OperationalError, _adapted.InternalClientError)
except ImportError:  # pragma: no cover - asyncpg is a dependency
    _DRIVER_TRANSIENT = ()

_TRANSIENT: tuple[type[BaseException], ...] = (OperationalError, OSError, ConnectionError,
                                              *_DRIVER_TRANSIENT)

INSERT_CHUNK = 500  # rows per INSERT statement (stays under bind-parameter limits)
PG_INSERT_CHUNK = 10_000  # PostgreSQL: column arrays, one parameter per column
_DUE_NOW, _DUE_LIMIT = "due_now", "due_limit"  # the parameters of a due query that vary
DUE_SQL_CACHE = 256  # compiled due queries kept (one per queue and fetch shape)
_JOB_FIELDS = pg.JOB_COLUMNS


def _job(row: Any) -> Job:
    """A Job from a row of ``jobs`` or ``archived_jobs``: a mapping (an asyncpg
    record, or a SQLAlchemy row's ``_mapping``); the columns of jobs (and
    archived_jobs: finished_at) are Job's fields."""
    return row_reader(tuple(row.keys()))(tuple(row.values()))


# a claimed job: the job as fetched, marked running by this try
_claimed = evolver(Job, ("status", "attempt", "correlation_key", "deadline", "launched_at",
                         "owner", "launch_confirmed", "updated_at"))


def _jobs(rows: Sequence[Any]) -> list[Job]:
    """Jobs from asyncpg records of one result (one column list)."""
    if not rows:
        return []
    read = row_reader(tuple(rows[0].keys()))
    return [read(r) for r in rows]


def _job_values(job: Job) -> dict[str, Any]:
    return {name: getattr(job, name) for name in _JOB_FIELDS}


def _inbox_of(changes: Sequence[Change]) -> tuple[list[int], list[str], list[str]]:
    """The responses these changes apply: (inbox ids, their queues, their job ids)."""
    pairs = [(i, c.queue, c.id) for c in changes for i in c.inbox_ids]
    return [i for i, _, _ in pairs], [q for _, q, _ in pairs], [j for _, _, j in pairs]


def _chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


class SQLStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        self._insert = postgresql.insert if self.is_postgres else sqlite.insert
        self._due_sql: dict[tuple[Any, ...], pg.Compiled] = {}
        self._queues: dict[str, tuple[tuple[Any, ...], QueueRecord]] = {}

    # -- lifecycle ---------------------------------------------------------------

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[AsyncConnection]:
        async with self._translated(), self.engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def _autocommit(self) -> AsyncIterator[Any]:
        """PostgreSQL: the asyncpg connection outside any transaction, for reads and
        for writes that are one statement (atomic on their own): no BEGIN and
        COMMIT round trips."""
        async with self._translated(), self.engine.connect() as conn:
            yield await pg.driver(conn, begin=False)

    @asynccontextmanager
    async def _translated(self) -> AsyncIterator[None]:
        """Driver errors become :mod:`hipq.errors` at this boundary."""
        try:
            yield
        except _TRANSIENT as exc:
            await self._drop_pool()
            raise TransientStoreError(f"database unavailable: {exc}") from exc
        except DBAPIError as exc:
            if exc.connection_invalidated:
                raise TransientStoreError(f"database connection lost: {exc}") from exc
            raise

    async def _drop_pool(self) -> None:
        """After a connection error outside SQLAlchemy's sight (statements sent
        straight to the driver): the pooled connections may all be dead (a database
        restart), so start over with a new pool rather than fail once per connection."""
        try:
            await self.engine.dispose(close=False)
        except Exception:
            log.debug("could not reset the connection pool", exc_info=True)

    async def close(self) -> None:
        await self.engine.dispose()

    async def ping(self) -> None:
        async with self._tx() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def migrate(self) -> int:
        """Create or upgrade the schema; idempotent. Returns the schema version."""
        async with self._tx() as conn:
            current = await self._version(conn)
            if current is not None and current > s.SCHEMA_VERSION:
                raise SchemaError(f"database schema version {current} is newer than this "
                                  f"hipq ({s.SCHEMA_VERSION}); upgrade hipq")
            await conn.run_sync(s.metadata.create_all)
            for version in sorted(s.UPGRADES):
                if current is not None and current < version:
                    for statement in s.UPGRADES[version]:
                        await conn.exec_driver_sql(statement)
            stmt = self._insert(s.meta).values(key="schema_version",
                                               value=str(s.SCHEMA_VERSION))
            await conn.execute(stmt.on_conflict_do_update(
                index_elements=["key"], set_={"value": str(s.SCHEMA_VERSION)}))
        return s.SCHEMA_VERSION

    async def check_schema(self) -> None:
        """Raise :class:`SchemaError` unless the database is migrated to this version."""
        try:
            async with self._tx() as conn:
                version = await self._version(conn)
        except DBAPIError:
            version = None
        if version != s.SCHEMA_VERSION:
            raise SchemaError(f"database schema is at version {version}, expected "
                              f"{s.SCHEMA_VERSION}: run 'hipq migrate'")

    async def _version(self, conn: AsyncConnection) -> int | None:
        has_meta = await conn.run_sync(lambda c: sa.inspect(c).has_table("hipq_meta"))
        if not has_meta:
            return None
        value = await conn.scalar(sa.select(s.meta.c.value).where(
            s.meta.c.key == "schema_version"))
        return int(value) if value is not None else None

    async def meta_get_or_set(self, key: str, value: str) -> str:
        """Return the stored value of ``key``, storing ``value`` first if absent."""
        async with self._tx() as conn:
            await conn.execute(self._insert(s.meta).values(key=key, value=value)
                               .on_conflict_do_nothing(index_elements=["key"]))
            stored = await conn.scalar(sa.select(s.meta.c.value).where(s.meta.c.key == key))
        return str(stored)

    # -- queues ------------------------------------------------------------------

    async def queue_upsert(self, config: QueueConfig, *, now: datetime) -> bool:
        """Create or replace a queue's settings. Returns True if it was created."""
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
        return None if row is None else self._queue(row._mapping)

    async def queue_list(self) -> list[QueueRecord]:
        """Every queue (each reconcile tick reads them: settings are re-validated
        only when their stored row changed)."""
        if self.is_postgres:
            async with self._autocommit() as db:
                rows: list[Any] = await db.fetch("SELECT * FROM queues ORDER BY id")
        else:
            async with self._tx() as conn:
                rows = [r._mapping for r in await conn.execute(
                    sa.select(s.queues).order_by(s.queues.c.id))]
        return [self._queue_cached(row) for row in rows]

    def _queue_cached(self, row: Any) -> QueueRecord:
        cached = self._queues.get(row["id"])
        if cached is not None and cached[0] == (row["config"], row["paused"], row["updated_at"]):
            return cached[1]
        record = self._queue(row)
        if len(self._queues) >= DUE_SQL_CACHE:
            self._queues.clear()
        self._queues[row["id"]] = ((row["config"], row["paused"], row["updated_at"]), record)
        return record

    @staticmethod
    def _queue(row: Any) -> QueueRecord:
        """A QueueRecord from a row of ``queues`` (a mapping)."""
        config = QueueConfig.model_validate({**row["config"], "paused": row["paused"]})
        return QueueRecord(config=config, paused=row["paused"], created_at=row["created_at"],
                           updated_at=row["updated_at"])

    async def queue_set_paused(self, queue_id: str, paused: bool, *, now: datetime) -> bool:
        async with self._tx() as conn:
            result = await conn.execute(s.queues.update().where(s.queues.c.id == queue_id)
                                        .values(paused=paused, updated_at=now))
        return bool(result.rowcount)

    # -- enqueue -----------------------------------------------------------------

    async def job_insert_many(self, new_jobs: Sequence[Job]) -> list[InsertOutcome]:
        """Insert queued jobs, idempotently per (queue, id).

        A job whose (queue, id) exists, live or archived, is ``exists`` when its
        ``body_hash`` matches and ``conflict`` otherwise; a fixed correlation key
        already used by a live job is a ``conflict`` too.
        """
        firsts: dict[tuple[str, str], Job] = {}
        for job in new_jobs:
            firsts.setdefault(job.key, job)
        outcomes: dict[tuple[str, str], InsertOutcome] = {}
        if self.is_postgres:  # one statement per chunk, each atomic: no transaction
            async with self._autocommit() as db:
                for chunk in _chunks(list(firsts.values()), PG_INSERT_CHUNK):
                    outcomes.update(await self._insert_chunk_pg(db, chunk))
        else:
            for chunk in _chunks(list(firsts.values()), INSERT_CHUNK):
                async with self._tx() as conn:
                    outcomes.update(await self._insert_chunk(conn, chunk))
        return [outcomes[job.key] if firsts[job.key] is job
                else self._repeat_outcome(job, outcomes[job.key]) for job in new_jobs]

    @classmethod
    def _repeat_outcome(cls, job: Job, first: InsertOutcome) -> InsertOutcome:
        """A (queue, id) repeated in one call: judged against what its first occurrence
        left stored, so an item is never reported created while another body is kept."""
        stored = {} if first.job is None else {job.key: first.job}
        return cls._insert_outcome(job, set(), stored)

    async def _insert_chunk(self, conn: AsyncConnection,
                            chunk: Sequence[Job]) -> dict[tuple[str, str], InsertOutcome]:
        unique = list({job.key: job for job in chunk}.values())
        stmt = (self._insert(s.jobs).on_conflict_do_nothing()
                .returning(s.jobs.c.queue, s.jobs.c.id))
        rows = await conn.execute(stmt, [_job_values(job) for job in unique])
        inserted = {(r.queue, r.id) for r in rows}
        keys = [job.key for job in unique]
        archived = await self._hashes(conn, s.archived_jobs, keys)
        clash = [k for k in inserted if k in archived]
        if clash:  # an archived job keeps its id: undo the insert, answer as a repeat
            await conn.execute(s.jobs.delete().where(
                sa.tuple_(s.jobs.c.queue, s.jobs.c.id).in_(clash)))
            inserted -= set(clash)
        live = await self._hashes(conn, s.jobs, [k for k in keys if k not in inserted])
        out: dict[tuple[str, str], InsertOutcome] = {}
        for job in unique:
            out[job.key] = self._insert_outcome(job, inserted, {**live, **archived})
        return out

    async def _insert_chunk_pg(self, db: Any,
                               chunk: Sequence[Job]) -> dict[tuple[str, str], InsertOutcome]:
        """One INSERT of column arrays, first without ON CONFLICT (a repeat of a live
        job is the rare case; it fails the statement, which then runs guarded); an
        id already archived is not inserted (it is answered as a repeat of the
        archived job). When every row went in, nothing is looked up."""
        unique = list({job.key: job for job in chunk}.values())
        insert = pg.insert_jobs(unique)
        try:
            rows = await db.fetch(insert.plain, *insert.params)
        except pg.UNIQUE_VIOLATION:
            rows = await db.fetch(insert.guarded, *insert.params)
        if len(rows) == len(unique):
            created = InsertStatus.CREATED
            return {job.key: InsertOutcome(id=job.id, status=created, job=job) for job in unique}
        inserted = {(r["queue"], r["id"]) for r in rows}
        missing: dict[str, list[str]] = {}
        for job in unique:
            if job.key not in inserted:
                missing.setdefault(job.queue, []).append(job.id)
        existing: dict[tuple[str, str], Job] = {}
        for queue, ids in missing.items():  # repeats: what is stored, archived or live
            for sql in (pg.ARCHIVED_BY_IDS, pg.LIVE_BY_IDS):
                for r in await db.fetch(sql, queue, ids):
                    existing.setdefault((r["queue"], r["id"]), _job(r))
        return {job.key: self._insert_outcome(job, inserted, existing) for job in unique}

    async def job_merge(self, job: Job) -> InsertOutcome:
        """Enqueue into a merging queue: append ``job.data["payloads"]`` to the
        still-queued, never-launched job of the same ordering key, or insert ``job``
        if there is none. Idempotent per job id (merged ids are remembered)."""
        t, m = s.jobs, s.merged_jobs
        async with self._tx() as conn:
            known = await self._merged_or_existing(conn, job)
            if known is not None:
                return known
            stmt = (sa.select(t).where(t.c.queue == job.queue, t.c.ordering_key == job.ordering_key,
                                       t.c.status == s.QUEUED, t.c.attempt == 0)
                    .order_by(t.c.key_order_at.desc(), t.c.id.desc()).limit(1))
            if self.is_postgres:
                stmt = stmt.with_for_update()
            row = (await conn.execute(stmt)).first()
            if row is not None:
                host = _job(row._mapping)
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
        m = s.merged_jobs
        row = (await conn.execute(sa.select(m).where(m.c.queue == job.queue,
                                                     m.c.id == job.id))).first()
        found: dict[tuple[str, str], Job] = {}
        if row is not None:
            host = await self._hashes(conn, s.jobs, [(job.queue, row.into_id)])
            host = host or await self._hashes(conn, s.archived_jobs, [(job.queue, row.into_id)])
            host_job = next(iter(host.values()), None)
            status = (InsertStatus.EXISTS if row.body_hash == job.body_hash
                      else InsertStatus.CONFLICT)
            return InsertOutcome(id=job.id, status=status, job=host_job,
                                 error=None if status is InsertStatus.EXISTS else
                                 f"job {job.id!r} was already merged with a different body")
        for table in (s.jobs, s.archived_jobs):
            found.update(await self._hashes(conn, table, [job.key]))
        if job.key in found:
            return self._insert_outcome(job, set(), found)
        return None

    @staticmethod
    def _insert_outcome(job: Job, inserted: set[tuple[str, str]],
                        existing: dict[tuple[str, str], Job]) -> InsertOutcome:
        if job.key in inserted:
            return InsertOutcome(id=job.id, status=InsertStatus.CREATED, job=job)
        found = existing.get(job.key)
        if found is None:
            return InsertOutcome(id=job.id, status=InsertStatus.CONFLICT,
                                 error=f"correlation key {job.correlation_key!r} is in use "
                                       "by another live job")
        if found.body_hash == job.body_hash:
            return InsertOutcome(id=job.id, status=InsertStatus.EXISTS, job=found)
        return InsertOutcome(id=job.id, status=InsertStatus.CONFLICT, job=found,
                             error=f"job {job.id!r} already exists in queue {job.queue!r} "
                                   "with a different body")

    @staticmethod
    async def _hashes(conn: AsyncConnection, table: sa.Table,
                      keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Job]:
        if not keys:
            return {}
        rows = await conn.execute(sa.select(table).where(
            sa.tuple_(table.c.queue, table.c.id).in_(keys)))
        return {(r.queue, r.id): _job(r._mapping) for r in rows}

    # -- reading jobs ------------------------------------------------------------

    async def job_get(self, queue: str, job_id: str) -> Job | None:
        """The job wherever it is: the hot table, else the archive; a job merged into
        another (``merge_by_ordering_key``) answers with the job that holds it."""
        async with self._tx() as conn:
            for target in (job_id, await conn.scalar(sa.select(s.merged_jobs.c.into_id).where(
                    s.merged_jobs.c.queue == queue, s.merged_jobs.c.id == job_id))):
                if target is None:
                    continue
                for table in (s.jobs, s.archived_jobs):
                    row = (await conn.execute(sa.select(table).where(
                        table.c.queue == queue, table.c.id == target))).first()
                    if row is not None:
                        return _job(row._mapping)
        return None

    async def job_attempts(self, queue: str, job_id: str) -> list[Attempt]:
        t = s.job_attempts
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t).where(t.c.queue == queue, t.c.job_id == job_id)
                                      .order_by(t.c.attempt, t.c.id))
            return [Attempt(attempt=r.attempt, launched_at=r.launched_at,
                            finished_at=r.finished_at, outcome=r.outcome, error=r.error,
                            response=r.response) for r in rows]

    async def job_list_archived(self, *, queue: str | None = None, status: str | None = None,
                                limit: int = 100,
                                after: tuple[datetime, str, str] | None = None) -> list[Job]:
        """Archived jobs, newest first by (finished_at, queue, id); ``after`` is the
        last key of the previous page (keyset pagination: no gaps, no repeats)."""
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
            return [_job(r._mapping) for r in await conn.execute(stmt)]

    # -- the reconcile loop's reads and claims -----------------------------------

    def due_query(self, *, queue: str, now: datetime, limit: int, ordering: Ordering,
                  critical_only: bool = False, group: str | None = None,
                  default_group_excluding: Sequence[str] | None = None,
                  key_mode: str = "strict") -> sa.Select[Any]:
        """The due-jobs query: queued, ``run_at <= now``, in the queue's order, bounded.

        ``group`` keeps one quota group; ``default_group_excluding`` keeps the jobs
        in none of the listed groups. A job with an ordering key is due only if it
        is the head of its key: no job of the key is running and none queued comes
        before it (``key_mode="relaxed_on_retry"``: a queued job waiting for a
        retry does not hold the later ones back).
        """
        t = s.jobs
        order = ((t.c.run_at, t.c.priority, t.c.id)
                 if ordering is Ordering.TIME_THEN_PRIORITY or critical_only
                 else (t.c.priority, t.c.run_at, t.c.id))
        due_now = sa.bindparam(_DUE_NOW, now, type_=s.UTCDateTime)
        stmt = (sa.select(t).where(t.c.queue == queue, t.c.status == s.QUEUED,
                                   t.c.run_at <= due_now,
                                   sa.or_(t.c.ordering_key.is_(None),
                                          ~self._key_blocked(due_now, key_mode)))
                .order_by(*order).limit(sa.bindparam(_DUE_LIMIT, limit, type_=sa.Integer)))
        if critical_only:
            stmt = stmt.where(t.c.critical == sa.true())
        if group is not None:
            stmt = stmt.where(t.c.group_key == group)
        elif default_group_excluding is not None:
            stmt = stmt.where(sa.or_(t.c.group_key.is_(None),
                                     t.c.group_key.not_in(list(default_group_excluding))))
        return stmt

    @staticmethod
    def _key_blocked(now: Any, key_mode: str) -> sa.Exists:
        t, k = s.jobs, s.jobs.alias("key_head")
        earlier = sa.and_(k.c.status == s.QUEUED,
                          sa.tuple_(k.c.key_order_at, k.c.id) < sa.tuple_(t.c.key_order_at, t.c.id))
        if key_mode == "relaxed_on_retry":
            earlier = sa.and_(earlier, sa.not_(sa.and_(k.c.attempt > 0, k.c.run_at > now)))
        return sa.exists().where(k.c.queue == t.c.queue, k.c.ordering_key == t.c.ordering_key,
                                 sa.or_(k.c.status == s.RUNNING, earlier))

    async def job_fetch_due(self, *, queue: str, now: datetime, limit: int,
                            ordering: Ordering, critical_only: bool = False,
                            group: str | None = None,
                            default_group_excluding: Sequence[str] | None = None,
                            key_mode: str = "strict") -> list[Job]:
        """Due queued jobs of one queue in the queue's order (an index scan, bounded)."""
        def build() -> sa.Select[Any]:
            return self.due_query(queue=queue, now=now, limit=limit, ordering=ordering,
                                  critical_only=critical_only, group=group,
                                  default_group_excluding=default_group_excluding,
                                  key_mode=key_mode)

        if self.is_postgres:
            shape = (queue, ordering, critical_only, group,
                     None if default_group_excluding is None else tuple(default_group_excluding),
                     key_mode)
            compiled = self._due_sql.get(shape)
            if compiled is None:
                if len(self._due_sql) >= DUE_SQL_CACHE:  # queues come and go: stay bounded
                    self._due_sql.clear()
                compiled = self._due_sql[shape] = pg.compile_select(build(), self.engine.dialect)
            async with self._autocommit() as db:
                rows = await db.fetch(compiled.sql, *compiled.params(
                    {_DUE_NOW: now, _DUE_LIMIT: limit}))
            return _jobs(rows)
        async with self._tx() as conn:
            return [_job(r._mapping) for r in await conn.execute(build())]

    async def launch_events_recent(self, *, queue: str, since: datetime) -> dict[str,
                                                                                  list[datetime]]:
        """Launch times after ``since`` per rate group; older events are pruned."""
        e = s.launch_events
        async with self._tx() as conn:
            await conn.execute(e.delete().where(e.c.queue == queue, e.c.launched_at <= since))
            rows = await conn.execute(sa.select(e.c.group_key, e.c.launched_at)
                                      .where(e.c.queue == queue, e.c.launched_at > since))
            out: dict[str, list[datetime]] = {}
            for row in rows:
                out.setdefault(row.group_key, []).append(row.launched_at)
        return out

    async def job_mark_running_many(self, *, queue: str, ids: Sequence[str], now: datetime,
                                    owner: str, heartbeat_seconds: float | None,
                                    rate_groups: Mapping[str, str] | None = None,
                                    known: Mapping[str, Job] | None = None) -> list[Job]:
        """Step 4: claim the new batch as running in one statement.

        Only jobs still ``queued`` are claimed (a cancel in between wins); on
        PostgreSQL rows locked by another transaction are skipped. Each claimed job
        gets attempt + 1, its deadline, its owner, an unconfirmed launch and, unless
        its key is fixed, a fresh correlation key for this attempt.
        """
        if not ids:
            return []
        t = s.jobs
        seconds: Any = t.c.timeout_seconds
        if heartbeat_seconds is not None:
            seconds = sa.case((t.c.timeout_seconds < heartbeat_seconds, t.c.timeout_seconds),
                              else_=sa.literal(heartbeat_seconds, sa.Float))
        if self.is_postgres:
            return await self._claim_pg(queue=queue, ids=ids, now=now, owner=owner,
                                        heartbeat_seconds=heartbeat_seconds,
                                        rate_groups=rate_groups, known=known or {})
        new_key = t.c.token + "." + sa.cast(t.c.attempt + 1, sa.Text)
        async with self._tx() as conn:
            claim = list(ids)  # SQLite: BEGIN IMMEDIATE, a single writer (no row locks)
            if not claim:
                return []
            stmt = (t.update().where(t.c.queue == queue, t.c.status == s.QUEUED,
                                     t.c.id.in_(claim))
                    .values(status=JobState.RUNNING.value, attempt=t.c.attempt + 1,
                            launched_at=now,
                            deadline=s.add_seconds(sa.literal(now, s.UTCDateTime), seconds),
                            owner=owner, launch_confirmed=False, updated_at=now,
                            correlation_key=sa.case((t.c.correlation_fixed == sa.true(),
                                                     t.c.correlation_key), else_=new_key))
                    .returning(*t.columns))
            rows = (await conn.execute(stmt)).all()
            events = [{"queue": queue, "group_key": rate_groups[r.id], "launched_at": now}
                      for r in rows if rate_groups is not None and r.id in rate_groups]
            if events:  # these launches count against the queue's rate limit
                await conn.execute(s.launch_events.insert(), events)
        by_id = {row.id: _job(row._mapping) for row in rows}
        return [by_id[i] for i in ids if i in by_id]

    async def _claim_pg(self, *, queue: str, ids: Sequence[str], now: datetime, owner: str,
                        heartbeat_seconds: float | None,
                        rate_groups: Mapping[str, str] | None,
                        known: Mapping[str, Job]) -> list[Job]:
        args = (pg.CLAIM, queue, list(ids), now, owner, heartbeat_seconds)
        if rate_groups:  # the launches count against the rate limit, atomically
            async with self._tx() as conn:
                claimed = await (await pg.driver(conn)).fetch(*args)
                events = [{"queue": queue, "group_key": rate_groups[r["id"]],
                           "launched_at": now} for r in claimed if r["id"] in rate_groups]
                if events:
                    await conn.execute(s.launch_events.insert(), events)
        else:  # one statement: no transaction around it
            async with self._autocommit() as db:
                claimed = await db.fetch(*args)
        # rows: (id, attempt, correlation_key, deadline)
        unknown = [r[0] for r in claimed if r[0] not in known]
        if unknown:
            async with self._autocommit() as db:
                known = {**known, **{r["id"]: _job(r) for r in await db.fetch(
                    pg.LIVE_BY_IDS, queue, unknown)}}
        running = JobState.RUNNING
        by_id = {r[0]: _claimed(known[r[0]], running, r[1], r[2], r[3], now, owner, False, now)
                 for r in claimed}
        return [by_id[i] for i in ids if i in by_id]

    async def jobs_vacuum(self) -> bool:
        """PostgreSQL: ``VACUUM`` the hot ``jobs`` table (skipped if another vacuum
        holds it). Every job is inserted, updated and deleted there, so between
        autovacuum runs (a minute apart at best) its indexes fill with entries of
        jobs long gone, which every insert and due-jobs scan then steps over.
        False where there is nothing to do (SQLite) or it is not allowed."""
        if not self.is_postgres:
            return False
        try:
            async with self._autocommit() as db:
                await db.execute("VACUUM (SKIP_LOCKED) jobs")
        except TransientStoreError:
            raise
        except StoreError as exc:
            log.warning("cannot vacuum the jobs table (%s); leaving it to autovacuum", exc,
                        extra={"action": "vacuum_refused"})
            return False
        return True

    async def job_confirm_launch_many(self, *, keys: Sequence[tuple[str, str, int]],
                                      owner: str) -> int:
        """Record that these launches (queue, id, attempt) reached their target."""
        if not keys:
            return 0
        t = s.jobs
        if self.is_postgres:
            async with self._autocommit() as db:
                status = await db.execute(pg.CONFIRM, [q for q, _, _ in keys],
                                          [i for _, i, _ in keys], [a for _, _, a in keys], owner)
            return int(status.rsplit(" ", 1)[-1])
        async with self._tx() as conn:
            confirmed = 0
            for chunk in _chunks(list(keys), INSERT_CHUNK):
                result = await conn.execute(t.update().where(
                    sa.tuple_(t.c.queue, t.c.id, t.c.attempt).in_(list(chunk)),
                    t.c.status == s.RUNNING, t.c.owner == owner).values(launch_confirmed=True))
                confirmed += int(result.rowcount)
        return confirmed

    async def job_load_running(self, *, queue: str) -> list[Job]:
        """The running jobs of a queue: what a new owner adopts."""
        t = s.jobs
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t).where(t.c.queue == queue,
                                                         t.c.status == s.RUNNING))
            return [_job(r._mapping) for r in rows]

    async def job_adopt_many(self, *, queue: str, ids: Sequence[str], owner: str,
                             now: datetime) -> int:
        """Make ``owner`` the owner of these running jobs (after a lease takeover)."""
        if not ids:
            return 0
        t = s.jobs
        async with self._tx() as conn:
            result = await conn.execute(t.update().where(
                t.c.queue == queue, t.c.id.in_(list(ids)), t.c.status == s.RUNNING)
                .values(owner=owner, updated_at=now))
        return int(result.rowcount)

    async def job_reschedule_many(self, *, queue: str, run_ats: dict[str, datetime],
                                  now: datetime) -> int:
        """Move queued jobs to a new ``run_at`` (a throttler's reschedule)."""
        if not run_ats:
            return 0
        t = s.jobs
        moved = 0
        # One statement per chunk, not executemany: asyncpg reports no rowcount for that.
        async with self._tx() as conn:
            for chunk in _chunks(list(run_ats.items()), INSERT_CHUNK):
                run_at = sa.case(*((t.c.id == i, sa.literal(at, s.UTCDateTime))
                                   for i, at in chunk), else_=t.c.run_at)
                result = await conn.execute(t.update().where(
                    t.c.queue == queue, t.c.id.in_([i for i, _ in chunk]),
                    t.c.status == s.QUEUED).values(run_at=run_at, updated_at=now))
                moved += int(result.rowcount)
        return moved

    async def job_archive_queued_many(self, *, queue: str, ends: dict[str, tuple[str, Any]],
                                      now: datetime) -> list[Job]:
        """End queued jobs without a launch: id -> (terminal status, error)."""
        if not ends:
            return []
        t = s.jobs
        async with self._tx() as conn:
            rows = (await conn.execute(t.delete().where(
                t.c.queue == queue, t.c.id.in_(list(ends)), t.c.status == s.QUEUED)
                .returning(*t.columns))).all()
            archived = [_job(r._mapping).evolve(status=JobState(ends[r.id][0]), error=ends[r.id][1],
                                                 updated_at=now, finished_at=now) for r in rows]
            await self._archive_insert(conn, archived)
        return archived

    async def job_expired_sweep(self, *, now: datetime, limit: int) -> list[Job]:
        """Archive queued jobs whose ``expires_at`` passed, wherever they are in the
        backlog (bounded; returns what it archived)."""
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
            error = {"kind": "expired", "detail": "expires_at passed before launch"}
            archived = [_job(r._mapping).evolve(status=JobState.EXPIRED, error=error,
                                                 updated_at=now, finished_at=now)
                        for r in rows]
            await self._archive_insert(conn, archived)
        return archived

    async def job_cancel_queued(self, *, queue: str, job_id: str, now: datetime) -> Job | None:
        ended = await self.job_archive_queued_many(
            queue=queue, ends={job_id: (JobState.CANCELLED.value,
                                        {"kind": "cancelled", "detail": "cancelled by a user"})},
            now=now)
        return ended[0] if ended else None

    async def _archive_insert(self, conn: AsyncConnection, archived: Sequence[Job]) -> None:
        if not archived:
            return
        rows = [{**_job_values(j), "finished_at": j.finished_at} for j in archived]
        # executemany: SQLAlchemy compiles the statement once and batches the rows
        # ("insertmanyvalues"), instead of compiling a new N-row VALUES every time.
        await conn.execute(self._insert(s.archived_jobs).on_conflict_do_nothing(), rows)

    # -- step 3: persisting the batch --------------------------------------------

    async def persist_batch(self, *, changes: Sequence[Change], owner: str, now: datetime,
                            inbox: Sequence[tuple[int, InboxOutcome]] = ()
                            ) -> set[tuple[str, str]]:
        """Persist every changed copy of the batch in one transaction.

        Returns the (queue, id) of the changes that applied: jobs still running under
        ``owner`` at the expected attempt. Inbox rows in ``inbox`` are marked with
        their outcome in the same transaction, so a crash either keeps both or
        neither.
        """
        if not changes and not inbox:
            return set()
        if self.is_postgres:
            return await self._persist_pg(changes, owner, now, inbox)
        async with self._tx() as conn:
            live = await self._lock_live(conn, changes, owner)
            applied = [c for c in changes if (c.queue, c.id, c.attempt) in live]
            await self._apply_archives(conn, [c for c in applied if c.kind is ChangeKind.ARCHIVE],
                                       owner, now)
            await self._apply_requeues(conn, [c for c in applied if c.kind is ChangeKind.REQUEUE],
                                       owner, now)
            await self._apply_extends(conn, [c for c in applied if c.kind is ChangeKind.EXTEND],
                                      owner, now)
            await self._attempts_insert(conn, [c for c in applied
                                               if c.kind is not ChangeKind.EXTEND], now)
            marks = [(i, InboxOutcome.APPLIED) for c in applied for i in c.inbox_ids]
            await self._inbox_mark(conn, [*marks, *inbox], now)
        return {(c.queue, c.id) for c in applied}

    async def _persist_pg(self, changes: Sequence[Change], owner: str, now: datetime,
                          inbox: Sequence[tuple[int, InboxOutcome]]) -> set[tuple[str, str]]:
        """persist_batch on PostgreSQL: one statement per kind of change (which also
        marks the responses of the changes that applied), each guarded by owner and
        attempt so what it returns is what applied. One statement needs no
        transaction; several share one."""
        j = pg.to_json
        calls: list[tuple[str, list[Any]]] = []
        archives = [c for c in changes if c.kind is ChangeKind.ARCHIVE]
        requeues = [c for c in changes if c.kind is ChangeKind.REQUEUE]
        extends = [c for c in changes if c.kind is ChangeKind.EXTEND]
        if archives:
            calls.append((pg.ARCHIVE, [pg.archive_ends(archives), owner, now,
                                       *_inbox_of(archives)]))
        if requeues:
            calls.append((pg.REQUEUE, [
                [c.queue for c in requeues], [c.id for c in requeues],
                [c.attempt for c in requeues], [c.run_at for c in requeues],
                [j(c.data) for c in requeues], [j(c.error) for c in requeues],
                [c.outcome or "unknown" for c in requeues], [j(c.response) for c in requeues],
                [c.correlation_key for c in requeues], owner, now, *_inbox_of(requeues)]))
        if extends:
            calls.append((pg.EXTEND, [
                [c.queue for c in extends], [c.id for c in extends],
                [c.attempt for c in extends], [c.deadline for c in extends], owner, now,
                *_inbox_of(extends)]))
        applied: set[tuple[str, str]] = set()
        if len(calls) == 1 and not inbox:
            async with self._autocommit() as db:
                rows = await db.fetch(calls[0][0], *calls[0][1])
            return {(r["queue"], r["id"]) for r in rows}
        async with self._tx() as conn:
            db = await pg.driver(conn)
            for sql, args in calls:
                applied.update((r["queue"], r["id"]) for r in await db.fetch(sql, *args))
            await self._inbox_mark(conn, inbox, now)
        return applied

    async def _lock_live(self, conn: AsyncConnection, changes: Sequence[Change],
                         owner: str) -> set[tuple[str, str, int]]:
        if not changes:
            return set()
        t = s.jobs
        keys = list({(c.queue, c.id, c.attempt) for c in changes})
        live: set[tuple[str, str, int]] = set()
        for chunk in _chunks(keys, INSERT_CHUNK):
            stmt = sa.select(t.c.queue, t.c.id, t.c.attempt).where(
                sa.tuple_(t.c.queue, t.c.id, t.c.attempt).in_(list(chunk)),
                t.c.status == s.RUNNING, t.c.owner == owner)
            if self.is_postgres:
                stmt = stmt.with_for_update()
            live.update((r.queue, r.id, r.attempt) for r in await conn.execute(stmt))
        return live

    async def _apply_archives(self, conn: AsyncConnection, changes: Sequence[Change],
                              owner: str, now: datetime) -> None:
        if not changes:
            return
        t = s.jobs
        by_key = {(c.queue, c.id): c for c in changes}
        archived: list[Job] = []
        for chunk in _chunks(list(by_key), INSERT_CHUNK):
            rows = (await conn.execute(t.delete().where(
                sa.tuple_(t.c.queue, t.c.id).in_(list(chunk)), t.c.status == s.RUNNING,
                t.c.owner == owner).returning(*t.columns))).all()
            for row in rows:
                change = by_key[(row.queue, row.id)]
                archived.append(_job(row._mapping).evolve(
                    status=JobState(change.status or "failed"), result=change.result,
                    error=change.error, updated_at=now, finished_at=now))
        await self._archive_insert(conn, archived)

    async def _apply_requeues(self, conn: AsyncConnection, changes: Sequence[Change],
                              owner: str, now: datetime) -> None:
        if not changes:
            return
        t = s.jobs
        base: dict[str, Any] = {
            "status": JobState.QUEUED.value, "run_at": sa.bindparam("b_run_at"),
            "error": sa.bindparam("b_error", type_=s.JSON), "updated_at": now, "owner": None,
            "deadline": None, "launch_confirmed": False,
            "correlation_key": sa.case((t.c.correlation_fixed == sa.true(), t.c.correlation_key),
                                       else_=sa.null())}
        where = (t.c.queue == sa.bindparam("b_queue"), t.c.id == sa.bindparam("b_id"),
                 t.c.status == s.RUNNING, t.c.owner == owner)
        with_data = [c for c in changes if c.data is not None]
        same_data = [c for c in changes if c.data is None]
        if same_data:
            await conn.execute(t.update().where(*where).values(**base),
                               [self._requeue_params(c) for c in same_data])
        if with_data:
            await conn.execute(
                t.update().where(*where).values(**base, data=sa.bindparam("b_data", type_=s.JSON)),
                [{**self._requeue_params(c), "b_data": c.data} for c in with_data])

    @staticmethod
    def _requeue_params(change: Change) -> dict[str, Any]:
        return {"b_queue": change.queue, "b_id": change.id, "b_run_at": change.run_at,
                "b_error": change.error}

    async def _apply_extends(self, conn: AsyncConnection, changes: Sequence[Change],
                             owner: str, now: datetime) -> None:
        if not changes:
            return
        t = s.jobs
        stmt = t.update().where(t.c.queue == sa.bindparam("b_queue"),
                                t.c.id == sa.bindparam("b_id"), t.c.status == s.RUNNING,
                                t.c.owner == owner).values(deadline=sa.bindparam("b_deadline"),
                                                           updated_at=now)
        await conn.execute(stmt, [{"b_queue": c.queue, "b_id": c.id, "b_deadline": c.deadline}
                                  for c in changes])

    async def _attempts_insert(self, conn: AsyncConnection, changes: Sequence[Change],
                               now: datetime) -> None:
        rows = [{"queue": c.queue, "job_id": c.id, "attempt": c.attempt,
                 "correlation_key": c.correlation_key, "launched_at": c.launched_at,
                 "finished_at": now, "outcome": c.outcome or "unknown", "error": c.error,
                 "response": c.response} for c in changes]
        if rows:
            await conn.execute(s.job_attempts.insert(), rows)

    # -- the response inbox ------------------------------------------------------

    async def inbox_insert_many(self, responses: Sequence[Response], *,
                                now: datetime) -> list[int | None]:
        """Write responses durably. Returns each row id, or None for a duplicate
        ``dedup_key`` (already in the inbox)."""
        if not responses:
            return []
        rows = [{"correlation_key": r.correlation_key, "attempt": r.attempt, "status": r.status,
                 "retryable": r.retryable, "result": r.result, "error": r.error,
                 "extend_seconds": r.extend_seconds, "source": r.source,
                 "dedup_key": r.dedup_key, "received_at": now} for r in responses]
        ids: dict[str | None, int] = {}
        plain: list[int] = []
        if self.is_postgres:
            async with self._autocommit() as db:
                inserted = await db.fetch(pg.INSERT_INBOX, *pg.inbox_columns(rows))
        else:
            async with self._tx() as conn:
                inserted = []
                for chunk in _chunks(rows, INSERT_CHUNK):
                    stmt = (self._insert(s.response_inbox).values(list(chunk))
                            .on_conflict_do_nothing()
                            .returning(s.response_inbox.c.id, s.response_inbox.c.dedup_key))
                    inserted.extend(r._mapping for r in await conn.execute(stmt))
        for r in inserted:
            if r["dedup_key"] is None:
                plain.append(r["id"])
            else:
                ids[r["dedup_key"]] = r["id"]
        plain.sort()
        it = iter(plain)
        out: list[int | None] = []
        for response in responses:  # a dedup_key repeated within the call is a duplicate too
            key = response.dedup_key
            out.append(next(it) if key is None else ids.pop(key, None))
        return out

    async def inbox_pending_for_keys(self, keys: Sequence[str]) -> list[InboxRow]:
        """Unapplied responses for these correlation keys, oldest first."""
        if not keys:
            return []
        t = s.response_inbox
        out: list[InboxRow] = []
        if self.is_postgres:
            async with self._autocommit() as db:
                return [self._inbox_row(r) for r in
                        await db.fetch(pg.INBOX_PENDING_FOR_KEYS, list(keys))]
        async with self._tx() as conn:
            for chunk in _chunks(list(keys), INSERT_CHUNK):
                rows = await conn.execute(sa.select(t).where(
                    t.c.applied_at.is_(None), t.c.correlation_key.in_(list(chunk))))
                out.extend(self._inbox_row(r._mapping) for r in rows)
        out.sort(key=lambda r: r.id)
        return out

    async def inbox_pending_scan(self, *, after_id: int, before: datetime,
                                 limit: int) -> list[InboxRow]:
        """Unapplied responses with id > ``after_id`` received before ``before``:
        one bounded page of the sweep, which walks the pending rows by id."""
        t = s.response_inbox
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t).where(
                t.c.applied_at.is_(None), t.c.id > after_id, t.c.received_at < before)
                .order_by(t.c.id).limit(limit))
            return [self._inbox_row(r._mapping) for r in rows]

    async def inbox_mark_many(self, marks: Sequence[tuple[int, InboxOutcome]], *,
                              now: datetime) -> None:
        async with self._tx() as conn:
            await self._inbox_mark(conn, marks, now)

    async def _inbox_mark(self, conn: AsyncConnection,
                          marks: Sequence[tuple[int, InboxOutcome]], now: datetime) -> None:
        if not marks:
            return
        if self.is_postgres:
            db = await pg.driver(conn)
            await db.execute(pg.INBOX_MARK, [i for i, _ in marks], [str(m) for _, m in marks],
                             now)
            return
        t = s.response_inbox
        by_outcome: dict[str, list[int]] = {}
        for row_id, mark in marks:
            by_outcome.setdefault(str(mark), []).append(row_id)
        for outcome, ids in by_outcome.items():
            for chunk in _chunks(ids, INSERT_CHUNK):
                await conn.execute(t.update().where(t.c.id.in_(list(chunk)),
                                                    t.c.applied_at.is_(None))
                                   .values(applied_at=now, outcome=outcome))

    @staticmethod
    def _inbox_row(r: Any) -> InboxRow:
        """An InboxRow from a mapping (an asyncpg record or a SQLAlchemy ``_mapping``)."""
        return InboxRow(id=r["id"], correlation_key=r["correlation_key"], attempt=r["attempt"],
                        status=r["status"], retryable=r["retryable"], result=r["result"],
                        error=r["error"], extend_seconds=r["extend_seconds"],
                        source=r["source"], received_at=r["received_at"])

    async def job_keys_lookup(self, keys: Sequence[str]) -> dict[str, Job]:
        """Live jobs by correlation key (for responses not matched in memory)."""
        if not keys:
            return {}
        t = s.jobs
        if self.is_postgres:
            async with self._autocommit() as db:
                return {r["correlation_key"]: _job(r)
                        for r in await db.fetch(pg.JOBS_BY_KEYS, list(keys))}
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t).where(t.c.correlation_key.in_(list(keys))))
            return {r.correlation_key: _job(r._mapping) for r in rows}

    async def archived_by_attempt_keys(self, keys: Sequence[str]) -> dict[str, tuple[str, str]]:
        """(queue, job id) of past tries by correlation key: the history of late responses."""
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
        """Record responses that came after their job's try had ended."""
        if not rows:
            return
        a = s.job_attempts
        async with self._tx() as conn:
            # A response without an attempt number belongs to the try that had its key.
            tries = {r.correlation_key: r.attempt for r in await conn.execute(
                sa.select(a.c.correlation_key, sa.func.max(a.c.attempt).label("attempt"))
                .where(a.c.correlation_key.in_(list({r.correlation_key for _, _, r in rows})))
                .group_by(a.c.correlation_key))}
            values = [{"queue": q, "job_id": j,
                       "attempt": r.attempt or tries.get(r.correlation_key) or 0,
                       "correlation_key": r.correlation_key, "launched_at": None,
                       "finished_at": now, "outcome": "late_response", "error": r.error,
                       "response": {"status": r.status, "result": r.result}}
                      for q, j, r in rows]
            await conn.execute(a.insert(), values)

    # -- leases ------------------------------------------------------------------

    async def lease_acquire_many(self, *, queues: Sequence[str], owner: str, now: datetime,
                                 seconds: float) -> set[str]:
        """Acquire or renew leases; returns the queues ``owner`` holds now (queues
        held by another owner whose lease has not expired are left alone)."""
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

    # -- stats ---------------------------------------------------------------------

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
        """Responses in the inbox by outcome (``pending`` for those not yet classified)."""
        t = s.response_inbox
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t.c.outcome, sa.func.count())
                                      .group_by(t.c.outcome))
            return {str(r[0] or "pending"): int(r[1]) for r in rows}

    async def archive_prune(self, *, before: datetime, limit: int) -> int:
        """Delete archived jobs (and their tries) finished before ``before``; bounded."""
        t, a = s.archived_jobs, s.job_attempts
        async with self._tx() as conn:
            keys = [tuple(k) for k in await conn.execute(
                sa.select(t.c.queue, t.c.id).where(t.c.finished_at < before)
                .order_by(t.c.finished_at).limit(limit))]
            if not keys:
                return 0
            await conn.execute(a.delete().where(sa.tuple_(a.c.queue, a.c.job_id).in_(keys)))
            await conn.execute(t.delete().where(sa.tuple_(t.c.queue, t.c.id).in_(keys)))
            await conn.execute(s.response_inbox.delete().where(
                s.response_inbox.c.applied_at < before))
        return len(keys)

    # -- operator views (dashboard, ``hipq jobs``, ``GET /v1/queued-jobs``) ---------
    # One read, generic SQLAlchemy Core on both databases; not on the hot path.

    async def job_list_live(self, *, queue: str, state: str, ordering: Ordering,
                            limit: int, after: Sequence[Any] | None = None) -> list[Job]:
        """The live jobs of a queue, keyset-paginated. ``state="queued"``: in queue
        order (``ordering``: (priority, run_at, id) or (run_at, priority, id));
        ``state="running"``: by launch time (launched_at, id). ``after`` is the
        sort key of the previous page's last job (the columns above, in order)."""
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
            return [_job(r._mapping) for r in await conn.execute(stmt)]


def _sqlite_setup(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def normalize_url(url: str) -> str:
    """Accept plain ``postgresql://`` / ``sqlite://`` URLs and add the async driver."""
    for plain, driver in (("postgresql://", "postgresql+asyncpg://"),
                          ("postgres://", "postgresql+asyncpg://"),
                          ("sqlite://", "sqlite+aiosqlite://")):
        if url.startswith(plain):
            return driver + url[len(plain):]
    return url


def create_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    url = normalize_url(url)
    if url.startswith("sqlite"):
        engine = create_async_engine(url, pool_size=1, max_overflow=0, pool_timeout=60)
        _sqlite_setup(engine)
        return engine
    if url.startswith("postgresql"):
        # No pre-ping (it costs a BEGIN, a query and a ROLLBACK per checkout): a
        # connection found dead fails its transaction (a TransientStoreError the
        # caller retries), and SQLAlchemy then invalidates the whole pool, so the
        # next checkout after a database restart gets a fresh connection.
        # No overflow: connections beyond pool_size are closed when returned, so under
        # load a busy API would open (and TLS-probe, and re-prepare statements on) a
        # new connection per request; requests wait for a pooled one instead.
        return create_async_engine(url, pool_size=pool_size, max_overflow=0,
                                   connect_args={"timeout": 10})
    raise StoreError(f"unsupported database URL {url.split(':', 1)[0]!r}: "
                     "use sqlite+aiosqlite:///file.db or postgresql+asyncpg://...")


async def open_store(url: str, *, pool_size: int = 10) -> SQLStore:
    """Open a store; the caller runs ``migrate()`` or ``check_schema()``."""
    try:
        engine = create_engine(url, pool_size=pool_size)
    except sa.exc.ArgumentError as exc:
        raise StoreError(f"bad database URL: {exc}") from None
    except ImportError as exc:
        raise StoreError(f"database driver missing: {exc}") from None
    return SQLStore(engine)

"""The SQLite driver (aiosqlite): the hot paths as SQLAlchemy Core statements.

SQLite is a single writer: every transaction starts with ``BEGIN IMMEDIATE``
(:func:`create_engine`), so a claim cannot race another and no row is locked.
Batches travel as ``IN`` lists of at most :data:`~hipq.store.rows.INSERT_CHUNK`
values per statement.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event, make_url
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from hipq.jobs import GENERATED_KEY_PREFIX, Job, JobState
from hipq.store import schema as s
from hipq.store.common import JobKey, SQLAlchemyStore, stored_jobs
from hipq.store.due import DueShape, due_query
from hipq.store.records import (
    Change,
    ChangeKind,
    InboxOutcome,
    InboxRow,
    InsertOutcome,
    Response,
)
from hipq.store.rows import (
    INSERT_CHUNK,
    chunks,
    inbox_ids_in_order,
    inbox_row,
    inbox_values,
    insert_outcome,
    job_from_row,
    job_values,
)


class SQLiteStore(SQLAlchemyStore):
    """The :class:`~hipq.store.base.Store` on SQLite."""

    dialect = "sqlite"
    supports_row_locks = False
    _insert_into = sqlite.insert

    # -- enqueue -----------------------------------------------------------------------

    async def _insert_jobs(self, jobs: Sequence[Job]) -> dict[JobKey, InsertOutcome]:
        outcomes: dict[JobKey, InsertOutcome] = {}
        for chunk in chunks(jobs, INSERT_CHUNK):
            async with self._tx() as conn:
                outcomes.update(await self._insert_chunk(conn, chunk))
        return outcomes

    async def _insert_chunk(self, conn: AsyncConnection,
                            unique: Sequence[Job]) -> dict[JobKey, InsertOutcome]:
        stmt = (self._insert(s.jobs).on_conflict_do_nothing()
                .returning(s.jobs.c.queue, s.jobs.c.id))
        rows = await conn.execute(stmt, [job_values(job) for job in unique])
        inserted = {(r.queue, r.id) for r in rows}
        keys = [job.key for job in unique]
        archived = await stored_jobs(conn, s.archived_jobs, keys)
        clash = [k for k in inserted if k in archived]
        if clash:  # an archived job keeps its id: undo the insert, answer as a repeat
            await conn.execute(s.jobs.delete().where(
                sa.tuple_(s.jobs.c.queue, s.jobs.c.id).in_(clash)))
            inserted -= set(clash)
        live = await stored_jobs(conn, s.jobs, [k for k in keys if k not in inserted])
        existing = {**live, **archived}
        return {job.key: insert_outcome(job, inserted, existing) for job in unique}

    # -- the reconcile loop --------------------------------------------------------------

    async def _fetch_due(self, shape: DueShape, *, now: datetime, limit: int) -> list[Job]:
        async with self._tx() as conn:
            return [job_from_row(r._mapping)
                    for r in await conn.execute(due_query(shape, now=now, limit=limit))]

    async def job_mark_running_many(self, *, queue: str, ids: Sequence[str], now: datetime,
                                    owner: str, heartbeat_seconds: float | None,
                                    rate_groups: Mapping[str, str] | None = None,
                                    known: Mapping[str, Job] | None = None) -> list[Job]:
        if not ids:
            return []
        t = s.jobs
        seconds: Any = t.c.timeout_seconds
        if heartbeat_seconds is not None:
            seconds = sa.case((t.c.timeout_seconds < heartbeat_seconds, t.c.timeout_seconds),
                              else_=sa.literal(heartbeat_seconds, sa.Float))
        new_key = GENERATED_KEY_PREFIX + t.c.token + "." + sa.cast(t.c.attempt + 1, sa.Text)
        stmt = (t.update().where(t.c.queue == queue, t.c.status == s.QUEUED,
                                 t.c.id.in_(list(ids)))
                .values(status=JobState.RUNNING.value, attempt=t.c.attempt + 1,
                        launched_at=now,
                        # timestamps are REAL seconds on SQLite (hipq.store.schema)
                        deadline=sa.literal(now.timestamp(), sa.Float) + seconds,
                        owner=owner, launch_confirmed=False, updated_at=now,
                        correlation_key=sa.case((t.c.correlation_fixed == sa.true(),
                                                 t.c.correlation_key), else_=new_key))
                .returning(*t.columns))
        async with self._tx() as conn:
            rows = (await conn.execute(stmt)).all()
            events = [{"queue": queue, "group_key": rate_groups[r.id], "launched_at": now}
                      for r in rows if rate_groups is not None and r.id in rate_groups]
            if events:  # these launches count against the queue's rate limit
                await conn.execute(s.launch_events.insert(), events)
        by_id = {row.id: job_from_row(row._mapping) for row in rows}
        return [by_id[i] for i in ids if i in by_id]

    async def job_confirm_launch_many(self, *, keys: Sequence[tuple[str, str, int]],
                                      owner: str) -> int:
        if not keys:
            return 0
        t = s.jobs
        confirmed = 0
        async with self._tx() as conn:
            for chunk in chunks(list(keys), INSERT_CHUNK):
                result = await conn.execute(t.update().where(
                    sa.tuple_(t.c.queue, t.c.id, t.c.attempt).in_(list(chunk)),
                    t.c.status == s.RUNNING, t.c.owner == owner).values(launch_confirmed=True))
                confirmed += int(result.rowcount)
        return confirmed

    # -- step 3: persisting the batch ------------------------------------------------------

    async def persist_batch(self, *, changes: Sequence[Change], owner: str, now: datetime,
                            inbox: Sequence[tuple[int, InboxOutcome]] = ()
                            ) -> set[JobKey]:
        if not changes and not inbox:
            return set()
        async with self._tx() as conn:
            live = await self._live(conn, changes, owner)
            applied = [c for c in changes if (c.queue, c.id, c.attempt) in live]
            kinds = {kind: [c for c in applied if c.kind is kind] for kind in ChangeKind}
            await self._apply_archives(conn, kinds[ChangeKind.ARCHIVE], owner, now)
            await self._apply_requeues(conn, kinds[ChangeKind.REQUEUE], owner, now)
            await self._apply_extends(conn, kinds[ChangeKind.EXTEND], owner, now)
            await self._attempts_insert(conn, [*kinds[ChangeKind.ARCHIVE],
                                               *kinds[ChangeKind.REQUEUE]], now)
            marks = [(i, InboxOutcome.APPLIED) for c in applied for i in c.inbox_ids]
            await self._inbox_mark(conn, [*marks, *inbox], now)
        return {(c.queue, c.id) for c in applied}

    @staticmethod
    async def _live(conn: AsyncConnection, changes: Sequence[Change],
                    owner: str) -> set[tuple[str, str, int]]:
        """The (queue, id, attempt) of the changes whose job still runs under ``owner``."""
        t = s.jobs
        keys = list({(c.queue, c.id, c.attempt) for c in changes})
        live: set[tuple[str, str, int]] = set()
        for chunk in chunks(keys, INSERT_CHUNK):
            stmt = sa.select(t.c.queue, t.c.id, t.c.attempt).where(
                sa.tuple_(t.c.queue, t.c.id, t.c.attempt).in_(list(chunk)),
                t.c.status == s.RUNNING, t.c.owner == owner)
            live.update((r.queue, r.id, r.attempt) for r in await conn.execute(stmt))
        return live

    async def _apply_archives(self, conn: AsyncConnection, changes: Sequence[Change],
                              owner: str, now: datetime) -> None:
        if not changes:
            return
        t = s.jobs
        by_key = {(c.queue, c.id): c for c in changes}
        archived: list[Job] = []
        for chunk in chunks(list(by_key), INSERT_CHUNK):
            rows = (await conn.execute(t.delete().where(
                sa.tuple_(t.c.queue, t.c.id).in_(list(chunk)), t.c.status == s.RUNNING,
                t.c.owner == owner).returning(*t.columns))).all()
            for row in rows:
                change = by_key[(row.queue, row.id)]
                archived.append(job_from_row(row._mapping).evolve(
                    status=JobState(change.status or "failed"), result=change.result,
                    error=change.error, updated_at=now, finished_at=now))
        await self._archive_insert(conn, archived)

    @staticmethod
    async def _apply_requeues(conn: AsyncConnection, changes: Sequence[Change],
                              owner: str, now: datetime) -> None:
        t = s.jobs
        base: dict[str, Any] = {
            "status": JobState.QUEUED.value, "run_at": sa.bindparam("b_run_at"),
            "error": sa.bindparam("b_error", type_=s.JSON), "updated_at": now, "owner": None,
            "deadline": None, "launch_confirmed": False,
            "correlation_key": sa.case((t.c.correlation_fixed == sa.true(), t.c.correlation_key),
                                       else_=sa.null())}
        where = (t.c.queue == sa.bindparam("b_queue"), t.c.id == sa.bindparam("b_id"),
                 t.c.status == s.RUNNING, t.c.owner == owner)
        same_data = [c for c in changes if c.data is None]
        with_data = [c for c in changes if c.data is not None]
        if same_data:
            await conn.execute(t.update().where(*where).values(**base),
                               [_requeue_params(c) for c in same_data])
        if with_data:
            await conn.execute(
                t.update().where(*where).values(**base, data=sa.bindparam("b_data", type_=s.JSON)),
                [{**_requeue_params(c), "b_data": c.data} for c in with_data])

    @staticmethod
    async def _apply_extends(conn: AsyncConnection, changes: Sequence[Change],
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

    @staticmethod
    async def _attempts_insert(conn: AsyncConnection, changes: Sequence[Change],
                               now: datetime) -> None:
        rows = [{"queue": c.queue, "job_id": c.id, "attempt": c.attempt,
                 "correlation_key": c.correlation_key, "launched_at": c.launched_at,
                 "finished_at": now, "outcome": c.outcome or "unknown", "error": c.error,
                 "response": c.response} for c in changes]
        if rows:
            await conn.execute(s.job_attempts.insert(), rows)

    # -- the response inbox ----------------------------------------------------------------

    async def inbox_insert_many(self, responses: Sequence[Response], *,
                                now: datetime) -> list[int | None]:
        if not responses:
            return []
        rows = [inbox_values(r, now) for r in responses]
        inserted: list[Any] = []
        async with self._tx() as conn:
            for chunk in chunks(rows, INSERT_CHUNK):
                stmt = (self._insert(s.response_inbox).values(list(chunk))
                        .on_conflict_do_nothing()
                        .returning(s.response_inbox.c.id, s.response_inbox.c.dedup_key))
                inserted.extend(r._mapping for r in await conn.execute(stmt))
        return inbox_ids_in_order(responses, inserted)

    async def inbox_pending_for_keys(self, keys: Sequence[str]) -> list[InboxRow]:
        if not keys:
            return []
        t = s.response_inbox
        out: list[InboxRow] = []
        async with self._tx() as conn:
            for chunk in chunks(list(keys), INSERT_CHUNK):
                rows = await conn.execute(sa.select(t).where(
                    t.c.applied_at.is_(None), t.c.correlation_key.in_(list(chunk))))
                out.extend(inbox_row(r._mapping) for r in rows)
        out.sort(key=lambda r: r.id)
        return out

    async def inbox_mark_many(self, marks: Sequence[tuple[int, InboxOutcome]], *,
                              now: datetime) -> None:
        async with self._tx() as conn:
            await self._inbox_mark(conn, marks, now)

    @staticmethod
    async def _inbox_mark(conn: AsyncConnection, marks: Sequence[tuple[int, InboxOutcome]],
                          now: datetime) -> None:
        t = s.response_inbox
        by_outcome: dict[str, list[int]] = {}
        for row_id, mark in marks:
            by_outcome.setdefault(str(mark), []).append(row_id)
        for outcome, ids in by_outcome.items():
            for chunk in chunks(ids, INSERT_CHUNK):
                await conn.execute(t.update().where(t.c.id.in_(list(chunk)),
                                                    t.c.applied_at.is_(None))
                                   .values(applied_at=now, outcome=outcome))

    async def job_keys_lookup(self, keys: Sequence[str]) -> dict[str, Job]:
        if not keys:
            return {}
        t = s.jobs
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t).where(t.c.correlation_key.in_(list(keys))))
            return {r.correlation_key: job_from_row(r._mapping) for r in rows}


def _requeue_params(change: Change) -> dict[str, Any]:
    return {"b_queue": change.queue, "b_id": change.id, "b_run_at": change.run_at,
            "b_error": change.error}


def create_engine(url: str) -> AsyncEngine:
    """An engine of one connection (a single writer), in WAL mode, whose every
    transaction is ``BEGIN IMMEDIATE``. A database file that does not exist yet is
    created readable by its owner only (0600): it holds target credentials and the
    signing key; SQLite gives its side files (``-wal``, ``-shm``, ``-journal``) the
    mode of the database file."""
    create_private(make_url(url).database)
    engine = create_async_engine(url, pool_size=1, max_overflow=0, pool_timeout=60)

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

    return engine


def create_private(database: str | None) -> None:
    """Create the database file (mode 0600) unless it exists or is in memory."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    with contextlib.suppress(OSError):  # exists; or SQLite will say what is wrong
        os.close(os.open(database, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))

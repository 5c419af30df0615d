"""The SQLite driver (aiosqlite): every statement SQLAlchemy Core over the tables of
:mod:`hipq.store.schema`, the schema made by the numbered files of
``hipq/store/migrations/sqlite/``. The reads are in :mod:`hipq.store.sqlite_reads`.

SQLite is a single writer: every transaction starts with ``BEGIN IMMEDIATE``
(:func:`create_engine`), so a claim cannot race another and no row is locked.
Batches travel as ``IN`` lists of at most :data:`~hipq.store.rows.INSERT_CHUNK`
values per statement.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event, make_url
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from hipq.jobs import GENERATED_KEY_PREFIX, Job, JobState, expired_error
from hipq.pause_scope import KEPT_CHARS, MAX_CHARS
from hipq.store import schema as s
from hipq.store.common import VERSION_KEY, JobKey
from hipq.store.history import LATE, late_values, try_of, within_late_bound
from hipq.store.records import (
    Backoff,
    Change,
    ChangeKind,
    InboxOutcome,
    InboxRow,
    InsertOutcome,
    InsertStatus,
    QueueState,
    Response,
    backoff_of,
)
from hipq.store.rows import (
    INSERT_CHUNK,
    chunks,
    inbox_ids_in_order,
    inbox_values,
    insert_outcome,
    job_from_row,
    job_values,
    merged_into,
    merged_outcome,
    queue_state_of,
    queue_state_values,
    stored_settings,
)
from hipq.store.sqlite_intake import SQLiteIntake
from hipq.store.sqlite_reads import stored_jobs, stored_version
from hipq.store.uncancelled import uncancelled

TRIES_CHUNK = 300  # tries per count statement: 3 parameters each (SQLite allows 999)


@uncancelled  # a cancelled caller must not leave SQLite's write lock held
class SQLiteStore(SQLiteIntake):
    """The :class:`~hipq.store.base.Store` on SQLite."""

    dialect = "sqlite"
    supports_row_locks = False
    supports_reads_beside_writes = False
    supports_notify = False

    # -- lifecycle -------------------------------------------------------------------

    async def ping(self) -> None:
        async with self._tx() as conn:
            await conn.execute(sa.text("SELECT 1"))

    async def migrate(self) -> int:
        """The numbered files above the recorded version, in one transaction (SQLite
        has a single writer: concurrent migrations take turns)."""
        async with self._tx() as conn:
            for migration in s.pending(self.dialect, await stored_version(conn)):
                for statement in statements(migration.sql):
                    await conn.exec_driver_sql(statement)
            stmt = insert(s.meta).values(key=VERSION_KEY, value=str(s.SCHEMA_VERSION))
            await conn.execute(stmt.on_conflict_do_update(
                index_elements=["key"], set_={"value": str(s.SCHEMA_VERSION)}))
        return s.SCHEMA_VERSION

    async def meta_get_or_set(self, key: str, value: str) -> str:
        async with self._tx() as conn:
            await conn.execute(insert(s.meta).values(key=key, value=value)
                               .on_conflict_do_nothing(index_elements=["key"]))
            stored = await conn.scalar(sa.select(s.meta.c.value).where(s.meta.c.key == key))
        return str(stored)

    # -- queues ----------------------------------------------------------------------

    async def queue_upsert(self, settings: Mapping[str, Any], *, now: datetime) -> bool:
        queue_id, body, paused = stored_settings(settings)
        async with self._tx() as conn:
            existed = await conn.scalar(sa.select(sa.func.count()).select_from(s.queues)
                                        .where(s.queues.c.id == queue_id))
            stmt = insert(s.queues).values(id=queue_id, config=body, paused=paused,
                                           created_at=now, updated_at=now)
            await conn.execute(stmt.on_conflict_do_update(
                index_elements=["id"],
                set_={"config": body, "paused": paused, "updated_at": now}))
        return not existed

    async def queue_set_paused(self, queue_id: str, paused: bool, *, now: datetime) -> bool:
        async with self._tx() as conn:
            result = await conn.execute(s.queues.update().where(s.queues.c.id == queue_id)
                                        .values(paused=paused, updated_at=now))
        return bool(result.rowcount)

    # -- enqueue -----------------------------------------------------------------------

    async def _insert_jobs(self, jobs: Sequence[Job]) -> dict[JobKey, InsertOutcome]:
        outcomes: dict[JobKey, InsertOutcome] = {}
        for chunk in chunks(jobs, INSERT_CHUNK):
            async with self._tx() as conn:
                outcomes.update(await self._insert_chunk(conn, chunk))
        return outcomes

    async def _insert_chunk(self, conn: AsyncConnection,
                            unique: Sequence[Job]) -> dict[JobKey, InsertOutcome]:
        stmt = (insert(s.jobs).on_conflict_do_nothing()
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

    async def job_merge(self, job: Job) -> InsertOutcome:
        t, m = s.jobs, s.merged_jobs
        async with self._tx() as conn:
            row = (await conn.execute(sa.select(m).where(m.c.queue == job.queue,
                                                         m.c.id == job.id))).first()
            if row is not None:  # a repeat of a job merged into another
                hosts = await stored_jobs(conn, s.jobs, [(job.queue, row.into_id)])
                hosts = hosts or await stored_jobs(conn, s.archived_jobs,
                                                   [(job.queue, row.into_id)])
                return merged_outcome(job, row.body_hash, next(iter(hosts.values()), None))
            found: dict[JobKey, Job] = {}
            for table in (s.jobs, s.archived_jobs):
                found.update(await stored_jobs(conn, table, [job.key]))
            if job.key in found:
                return insert_outcome(job, set(), found)
            row = (await conn.execute(
                sa.select(t).where(t.c.queue == job.queue, t.c.ordering_key == job.ordering_key,
                                   t.c.status == s.QUEUED, t.c.attempt == 0)
                .order_by(t.c.key_order_at.desc(), t.c.id.desc()).limit(1))).first()
            if row is not None:
                into = merged_into(job_from_row(row._mapping), job)
                await conn.execute(t.update().where(t.c.queue == into.queue, t.c.id == into.id)
                                   .values(data=into.data, updated_at=into.updated_at))
                await conn.execute(m.insert().values(queue=job.queue, id=job.id, into_id=into.id,
                                                     body_hash=job.body_hash,
                                                     created_at=job.created_at))
                return InsertOutcome(id=job.id, status=InsertStatus.CREATED, job=into)
        (outcome,) = await self.job_insert_many([job])
        return outcome

    # -- the reconcile loop --------------------------------------------------------------

    async def job_mark_running_many(self, *, queue: str, ids: Sequence[str], now: datetime,
                                    owner: str, heartbeat_seconds: float | None,
                                    rate_groups: Mapping[str, str] | None = None,
                                    known: Mapping[str, Job] | None = None) -> list[Job]:
        if not ids:
            return []
        async with self._tx() as conn:
            return await self._claim(conn, queue=queue, ids=ids, now=now, owner=owner,
                                     heartbeat_seconds=heartbeat_seconds,
                                     rate_groups=rate_groups)

    @staticmethod
    async def _claim(conn: AsyncConnection, *, queue: str, ids: Sequence[str], now: datetime,
                     owner: str, heartbeat_seconds: float | None,
                     rate_groups: Mapping[str, str] | None) -> list[Job]:
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
        rows = (await conn.execute(stmt)).all()
        events = [{"queue": queue, "group_key": rate_groups[r.id], "launched_at": now}
                  for r in rows if rate_groups is not None and r.id in rate_groups]
        if events:  # these launches count against the queue's rate limit
            await conn.execute(s.launch_events.insert(), events)
        by_id = {row.id: job_from_row(row._mapping) for row in rows}
        return [by_id[i] for i in ids if i in by_id]

    async def job_archive_ran_many(self, *, queue: str, changes: Sequence[Change],
                                   owner: str, now: datetime,
                                   heartbeat_seconds: float | None) -> set[JobKey]:
        """See :meth:`hipq.store.base.Store.job_archive_ran_many`. Here: the claim, the
        launch confirmed (the try ran) and step 3's archive, in one transaction."""
        if not changes:
            return set()
        async with self._tx() as conn:
            claimed = {j.id: j for j in await self._claim(
                conn, queue=queue, ids=[c.id for c in changes], now=now, owner=owner,
                heartbeat_seconds=heartbeat_seconds, rate_groups=None)}
            await self._confirm(conn, [(j.queue, j.id, j.attempt) for j in claimed.values()],
                                owner)
            ends = [replace(change, attempt=job.attempt, correlation_key=job.correlation_key,
                            launched_at=job.launched_at)  # the try as claimed
                    for change in changes if (job := claimed.get(change.id)) is not None]
            return await self._persist(conn, ends, owner, now, ())

    async def job_confirm_launch_many(self, *, keys: Sequence[tuple[str, str, int]],
                                      owner: str) -> int:
        if not keys:
            return 0
        async with self._tx() as conn:
            return await self._confirm(conn, keys, owner)

    @staticmethod
    async def _confirm(conn: AsyncConnection, keys: Sequence[tuple[str, str, int]],
                       owner: str) -> int:
        t = s.jobs
        confirmed = 0
        for chunk in chunks(list(keys), INSERT_CHUNK):
            result = await conn.execute(t.update().where(
                sa.tuple_(t.c.queue, t.c.id, t.c.attempt).in_(list(chunk)),
                t.c.status == s.RUNNING, t.c.owner == owner).values(launch_confirmed=True))
            confirmed += int(result.rowcount)
        return confirmed

    async def jobs_vacuum(self) -> bool:
        return False  # SQLite's file is its own business: nothing to do

    async def launch_events_recent(self, *, queue: str,
                                   since: datetime) -> dict[str, list[datetime]]:
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

    # -- step 3: persisting the batch ------------------------------------------------------

    async def persist_batch(self, *, changes: Sequence[Change], owner: str, now: datetime,
                            inbox: Sequence[tuple[int, InboxOutcome]] = ()
                            ) -> set[JobKey]:
        if not changes and not inbox:
            return set()
        async with self._tx() as conn:
            return await self._persist(conn, changes, owner, now, inbox)

    async def _persist(self, conn: AsyncConnection, changes: Sequence[Change], owner: str,
                       now: datetime, inbox: Sequence[tuple[int, InboxOutcome]]) -> set[JobKey]:
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
                                       else_=sa.null()),
            # a throttled try is given back (its attempt not spent) under a new token
            "attempt": t.c.attempt - sa.bindparam("b_back", type_=sa.Integer),
            "token": sa.func.coalesce(sa.bindparam("b_token", type_=sa.Text), t.c.token)}
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

    @staticmethod
    async def _archive_insert(conn: AsyncConnection, archived: Sequence[Job]) -> None:
        if not archived:
            return
        rows = [{**job_values(j), "finished_at": j.finished_at} for j in archived]
        # executemany: SQLAlchemy compiles the statement once and batches the rows
        # ("insertmanyvalues"), instead of compiling a new N-row VALUES every time.
        await conn.execute(insert(s.archived_jobs).on_conflict_do_nothing(), rows)

    # -- the response inbox ----------------------------------------------------------------

    async def inbox_insert_many(self, responses: Sequence[Response], *,
                                now: datetime) -> list[int | None]:
        if not responses:
            return []
        rows = [inbox_values(r, now) for r in responses]
        inserted: list[Any] = []
        async with self._tx() as conn:
            for chunk in chunks(rows, INSERT_CHUNK):
                stmt = (insert(s.response_inbox).values(list(chunk))
                        .on_conflict_do_nothing()
                        .returning(s.response_inbox.c.id, s.response_inbox.c.dedup_key))
                inserted.extend(r._mapping for r in await conn.execute(stmt))
        return inbox_ids_in_order(responses, inserted)

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
    async def attempt_record_late_many(self, rows: Sequence[tuple[str, str, InboxRow]], *,
                                       now: datetime) -> None:
        """Late responses within each try's bound; SQLite's single writer keeps the
        counts read true until the insert."""
        if not rows:
            return
        a = s.job_attempts
        async with self._tx() as conn:
            keys = list({r.correlation_key for _, _, r in rows})
            latest = {r.correlation_key: r.attempt for r in await conn.execute(
                sa.select(a.c.correlation_key, sa.func.max(a.c.attempt).label("attempt"))
                .where(a.c.correlation_key.in_(keys)).group_by(a.c.correlation_key))}
            values = late_values(rows, latest, now)
            recorded: Counter[tuple[str, str, int]] = Counter()
            for chunk in chunks(sorted({try_of(v) for v in values}), TRIES_CHUNK):
                recorded.update({(r[0], r[1], r[2]): int(r[3]) for r in await conn.execute(
                    sa.select(a.c.queue, a.c.job_id, a.c.attempt, sa.func.count())
                    .where(sa.tuple_(a.c.queue, a.c.job_id, a.c.attempt).in_(chunk),
                           a.c.outcome == LATE)
                    .group_by(a.c.queue, a.c.job_id, a.c.attempt))})
            kept = within_late_bound(values, recorded)
            if kept:
                await conn.execute(a.insert(), kept)

    # -- leases and membership -----------------------------------------------------------

    async def lease_acquire_many(self, *, queues: Sequence[str], owner: str, now: datetime,
                                 seconds: float) -> set[str]:
        if not queues:
            return set()
        t = s.leases
        expires = now + timedelta(seconds=seconds)
        new = insert(t).values([{"queue": q, "owner": owner, "acquired_at": now,
                                 "expires_at": expires} for q in queues])
        stmt = new.on_conflict_do_update(
            index_elements=["queue"],
            set_={"owner": new.excluded.owner, "expires_at": new.excluded.expires_at,
                  "acquired_at": sa.case((t.c.owner == new.excluded.owner, t.c.acquired_at),
                                         else_=new.excluded.acquired_at)},
            where=sa.or_(t.c.owner == new.excluded.owner, t.c.expires_at < now),
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

    async def daemon_heartbeat(self, *, owner: str, now: datetime,
                               seconds: float) -> list[str]:
        t = s.daemons
        expires = now + timedelta(seconds=seconds)
        new = insert(t).values(owner=owner, started_at=now, heartbeat_at=now, expires_at=expires)
        stmt = new.on_conflict_do_update(
            index_elements=["owner"],
            set_={"heartbeat_at": new.excluded.heartbeat_at,
                  "expires_at": new.excluded.expires_at})
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

    # -- the partner's word (docs/throttling.md) -------------------------------------------

    async def backoff_list(self, *, queues: Sequence[str] | None = None) -> list[Backoff]:
        t = s.queue_backoffs
        scope = _read_scope(t.c.scope)
        stmt = sa.select(t.c.queue, scope, t.c.until, t.c.reason, t.c.streak, t.c.since
                         ).order_by(t.c.queue, scope)
        if queues is not None:
            stmt = stmt.where(t.c.queue.in_(list(queues)))
        async with self._tx() as conn:
            return [backoff_of(r._mapping) for r in await conn.execute(stmt)]

    async def backoff_replace(self, *, queue: str, backoffs: Sequence[Backoff]) -> None:
        t = s.queue_backoffs
        async with self._tx() as conn:
            await conn.execute(t.delete().where(t.c.queue == queue))
            if backoffs:
                await conn.execute(t.insert(), [
                    {"queue": queue, "scope": b.scope, "until": b.until, "reason": b.reason,
                     "streak": b.streak, "since": b.since} for b in backoffs])

    async def backoff_clear(self, *, queue: str, now: datetime | None = None) -> int:
        t, j = s.queue_backoffs, s.jobs
        async with self._tx() as conn:
            cleared = (await conn.execute(t.delete().where(t.c.queue == queue))).rowcount
            if now is not None:  # as postgres.sql's backoff_clear_due
                error = j.c.error
                await conn.execute(j.update().where(
                    j.c.queue == queue, j.c.status == s.QUEUED, j.c.run_at > now,
                    sa.func.json_extract(error, "$.kind") == "throttled",
                    sa.func.json_type(error, "$.in_a_row").is_not(None),
                    sa.func.json_type(error, "$.data.from_partner") == "true",
                ).values(run_at=now, updated_at=now))
            return int(cleared)

    async def queue_state_list(self, *, queues: Sequence[str] | None = None
                               ) -> dict[str, QueueState]:
        t = s.queue_state
        stmt = sa.select(t)
        if queues is not None:
            stmt = stmt.where(t.c.queue.in_(list(queues)))
        async with self._tx() as conn:
            return {r.queue: queue_state_of(r._mapping) for r in await conn.execute(stmt)}

    async def queue_state_save(self, states: Sequence[QueueState]) -> None:
        if not states:
            return
        t = s.queue_state
        stmt = insert(t)
        stmt = stmt.on_conflict_do_update(index_elements=[t.c.queue], set_={
            c: stmt.excluded[c] for c in ("effective", "successes", "decreased_at", "held",
                                          "held_at", "throttled_total", "learned_rate",
                                          "learned_since", "budget")})
        async with self._tx() as conn:
            await conn.execute(stmt, [queue_state_values(state) for state in states])

    # -- housekeeping --------------------------------------------------------------------

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


def statements(script: str) -> Iterator[str]:
    """The statements of a SQL script, one at a time (SQLite's driver runs one per
    call, and its ``executescript`` would commit the migration's transaction)."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending.strip()
            pending = ""
    if pending.strip() and not all(part.lstrip().startswith("--") or not part.strip()
                                   for part in pending.splitlines()):
        raise ValueError(f"an unterminated statement in a migration: {pending.strip()[:80]}")


def _requeue_params(change: Change) -> dict[str, Any]:
    return {"b_queue": change.queue, "b_id": change.id, "b_run_at": change.run_at,
            "b_error": change.error, "b_back": 1 if change.give_back else 0,
            "b_token": change.token}


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


def _read_scope(column: sa.Column[Any]) -> sa.Label[Any]:
    """A pause's scope as postgres.sql's ``backoff_list`` reads it: one stored whole by
    an earlier version (longer than "=" and :data:`~hipq.pause_scope.MAX_CHARS`) cut
    to "=", its first :data:`~hipq.pause_scope.KEPT_CHARS` characters and "…"."""
    cut = sa.func.substr(column, 1, 1 + KEPT_CHARS).concat("…")
    return sa.case((sa.func.length(column) <= 1 + MAX_CHARS, column), else_=cut).label("scope")

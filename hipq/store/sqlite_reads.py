"""The SQLite driver's reads: every statement that only reads, as SQLAlchemy Core
(the driver's one style) over :mod:`hipq.store.schema`'s tables. The writes, the
schema and the engine are in :mod:`hipq.store.sqlite`, whose store builds on this.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.jobs import Attempt, Job, JobState, Ordering
from hipq.store import schema as s
from hipq.store.common import VERSION_KEY, JobKey, QueueCounts, StoreBase
from hipq.store.due import RELAXED, DueShape
from hipq.store.history import entry_of, history_of
from hipq.store.listing import (
    ENTRY_ERROR_CHARS,
    JOB_VALUES,
    VALUES,
    listed_job,
    listed_response,
)
from hipq.store.records import (
    InboxPage,
    InboxRow,
    JobHistory,
    JobStanding,
    ListedJob,
    ListedResponse,
    QueueRecord,
)
from hipq.store.rows import (
    INSERT_CHUNK,
    NO_BOUND,
    chunks,
    inbox_page,
    inbox_row,
    job_from_row,
    queue_record,
    standing_of,
)


class SQLiteReads(StoreBase):
    """The reading half of :class:`~hipq.store.sqlite.SQLiteStore`."""

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[AsyncConnection]:
        """A connection in a transaction (``BEGIN IMMEDIATE``: SQLite's one writer)."""
        async with self._translated(), self.engine.begin() as conn:
            yield conn

    async def _read_version(self) -> int | None:
        async with self._tx() as conn:
            return await stored_version(conn)

    # -- queues ----------------------------------------------------------------------

    async def queue_get(self, queue_id: str) -> QueueRecord | None:
        async with self._tx() as conn:
            row = (await conn.execute(sa.select(s.queues).where(s.queues.c.id == queue_id))).first()
        return None if row is None else queue_record(row._mapping)

    async def _queue_rows(self) -> Sequence[Any]:
        async with self._tx() as conn:
            return [r._mapping for r in await conn.execute(
                sa.select(s.queues).order_by(s.queues.c.id))]

    # -- jobs ------------------------------------------------------------------------

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

    async def job_get_listed(self, queue: str, job_id: str, *,
                             value_chars: int) -> ListedJob | None:
        # job_get's lookups, each reading the large values cut (hipq.store.listing)
        async with self._tx() as conn:
            for target in (job_id, await conn.scalar(sa.select(s.merged_jobs.c.into_id).where(
                    s.merged_jobs.c.queue == queue, s.merged_jobs.c.id == job_id))):
                if target is None:
                    continue
                for table in (s.jobs, s.archived_jobs):
                    row = (await conn.execute(listed_job_query(table, value_chars).where(
                        table.c.queue == queue, table.c.id == target))).first()
                    if row is not None:
                        return listed_job(row._mapping)
        return None

    async def job_attempts(self, queue: str, job_id: str) -> list[Attempt]:
        t = s.job_attempts
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t).where(t.c.queue == queue, t.c.job_id == job_id)
                                      .order_by(t.c.attempt, t.c.id))
            return [entry_of(r._mapping) for r in rows]

    async def job_history(self, queue: str, job_id: str, *, limit: int) -> JobHistory:
        t = s.job_attempts
        mine = sa.and_(t.c.queue == queue, t.c.job_id == job_id)
        last = (sa.select(t.c.attempt, t.c.launched_at, t.c.finished_at, t.c.outcome,
                          _entry_error(t.c.error, ENTRY_ERROR_CHARS))
                .where(mine).order_by(t.c.attempt.desc(), t.c.id.desc()).limit(limit))
        async with self._tx() as conn:
            rows = [r._mapping for r in await conn.execute(last)]
            total = await conn.scalar(sa.select(sa.func.count()).select_from(t).where(mine))
        return history_of(rows, total)

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
        out: list[Job] = []
        async with self._tx() as conn:  # in chunks: SQLite caps a statement's parameters
            for chunk in chunks(list(ids), INSERT_CHUNK):
                out.extend(job_from_row(r._mapping)
                           for r in await conn.execute(stmt.where(t.c.id.in_(chunk))))
        return out

    async def job_keys_lookup(self, keys: Sequence[str]) -> dict[str, Job]:
        if not keys:
            return {}
        t = s.jobs
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t).where(t.c.correlation_key.in_(list(keys))))
            return {r.correlation_key: job_from_row(r._mapping) for r in rows}

    async def job_count_due(self, *, queue: str, now: datetime, limit: int) -> int:
        t = s.jobs
        due = (sa.select(sa.literal(1)).where(t.c.queue == queue, t.c.status == s.QUEUED,
                                              t.c.run_at <= now).limit(limit).subquery())
        async with self._tx() as conn:
            return int((await conn.execute(sa.select(sa.func.count()).select_from(due)))
                       .scalar_one())

    async def _fetch_due(self, shape: DueShape, *, now: datetime, limit: int) -> list[Job]:
        async with self._tx() as conn:
            return [job_from_row(r._mapping) for r in await conn.execute(
                due_statement(shape), {DUE_NOW: now, DUE_LIMIT: limit})]

    # -- why a job waits (docs/throttling.md): read when one job is asked for, never by a tick ---

    async def job_standing(self, *, job: Job, now: datetime, ordering: Ordering, limit: int,
                           key_mode: str = "strict") -> JobStanding:
        t = s.jobs
        running = (sa.select(t.c.critical, t.c.group_key, sa.func.sum(t.c.weight))
                   .where(t.c.queue == job.queue, t.c.status == s.RUNNING)
                   .group_by(t.c.critical, t.c.group_key))
        ahead = sa.select(sa.func.count()).select_from(
            _ahead_query(job, now=now, ordering=ordering, limit=limit).subquery())
        async with self._tx() as conn:
            weights = list(await conn.execute(running))
            key_ahead = (None if job.ordering_key is None else await conn.scalar(
                _key_ahead_query(job, now=now, relaxed=key_mode == RELAXED)))
            return standing_of(weights, key_ahead, (await conn.execute(ahead)).scalar_one())

    # -- the response inbox -------------------------------------------------------------

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

    async def inbox_pending_scan(self, *, after_id: int, before: datetime, limit: int,
                                 max_chars: int | None = None) -> InboxPage:
        # as PostgreSQL's (postgres.sql): the page's ids and sizes first, then the rows
        # within the bound (a JSON value is stored as its text here)
        t = s.response_inbox
        chars = (sa.func.coalesce(sa.func.length(t.c.result), 0)
                 + sa.func.coalesce(sa.func.length(t.c.error), 0))
        sized = (sa.select(t.c.id, chars.label("chars"))
                 .where(t.c.applied_at.is_(None), t.c.id > after_id, t.c.received_at < before)
                 .order_by(t.c.id).limit(limit).subquery())
        page = sa.select(
            sized.c.id,
            (sa.func.sum(sized.c.chars).over(order_by=sized.c.id) - sized.c.chars)
            .label("chars_before"),
            sa.func.count().over().label("page_rows")).subquery()
        async with self._tx() as conn:
            rows = await conn.execute(
                sa.select(t, page.c.page_rows).join(page, page.c.id == t.c.id)
                .where(page.c.chars_before < (NO_BOUND if max_chars is None else max_chars))
                .order_by(t.c.id))
            return inbox_page([r._mapping for r in rows], limit)

    async def inbox_list_unmatched(self, *, limit: int = 100,
                                   after: tuple[datetime, int] | None = None,
                                   value_chars: int = 4096) -> list[ListedResponse]:
        stmt = unmatched_query(limit=limit, after=after, value_chars=value_chars)
        async with self._tx() as conn:
            return [listed_response(r._mapping) for r in await conn.execute(stmt)]

    async def archived_by_attempt_keys(self, keys: Sequence[str]) -> dict[str, tuple[str, str]]:
        if not keys:
            return {}
        a = s.job_attempts
        async with self._tx() as conn:  # the latest try of each key wins (ordered by id)
            return {r.correlation_key: (r.queue, r.job_id) for r in await conn.execute(
                sa.select(a.c.correlation_key, a.c.queue, a.c.job_id)
                .where(a.c.correlation_key.in_(list(keys))).order_by(a.c.id))}

    # -- leases and stats -------------------------------------------------------------

    async def lease_list(self) -> dict[str, tuple[str, datetime]]:
        t = s.leases
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t.c.queue, t.c.owner, t.c.expires_at))
            return {r.queue: (r.owner, r.expires_at) for r in rows}

    async def _queue_counts(self, now: datetime) -> dict[str, QueueCounts]:
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
            return {r[0]: (int(r[1] or 0), int(r[2] or 0), int(r[3] or 0), int(r[4] or 0), r[5])
                    for r in await conn.execute(stmt)}

    async def inbox_counts(self) -> dict[str, int]:
        t = s.response_inbox
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(t.c.outcome, sa.func.count())
                                      .group_by(t.c.outcome))
            return {str(r[0] or "pending"): int(r[1]) for r in rows}


async def stored_version(conn: AsyncConnection) -> int | None:
    """The schema version recorded in ``hipq_meta`` (None: no table, or no row)."""
    if not await conn.run_sync(lambda c: sa.inspect(c).has_table("hipq_meta")):
        return None
    value = await conn.scalar(sa.select(s.meta.c.value).where(s.meta.c.key == VERSION_KEY))
    return int(value) if value is not None else None


async def stored_jobs(conn: AsyncConnection, table: sa.Table,
                      keys: Sequence[JobKey]) -> dict[JobKey, Job]:
    """The jobs of ``table`` (``jobs`` or ``archived_jobs``) with these (queue, id)."""
    if not keys:
        return {}
    rows = await conn.execute(sa.select(table).where(
        sa.tuple_(table.c.queue, table.c.id).in_(keys)))
    return {(r.queue, r.id): job_from_row(r._mapping) for r in rows}


# -- the due query -----------------------------------------------------------------------


DUE_NOW, DUE_LIMIT = "due_now", "due_limit"  # the parameters of due_statement
DUE_STATEMENTS = 256  # shapes whose statements are kept (a shape per queue and read)


@functools.lru_cache(maxsize=DUE_STATEMENTS)
def due_statement(shape: DueShape) -> sa.Select[Any]:
    """Queued jobs of ``shape.queue`` with ``run_at <= now`` in the queue's order
    (time then priority when ``critical_only``), at most the limit; ``now`` and the
    limit are parameters (:data:`DUE_NOW`, :data:`DUE_LIMIT`): built once per shape,
    since building it cost a tick nearly as much as running it (1.3 ms against 2 on
    a 2-core EPYC)."""
    t = s.jobs
    order = ((t.c.run_at, t.c.priority, t.c.id) if shape.by_time
             else (t.c.priority, t.c.run_at, t.c.id))
    due_now = sa.bindparam(DUE_NOW, type_=s.UTCDateTime)
    stmt = (sa.select(t).where(t.c.queue == shape.queue, t.c.status == s.QUEUED,
                               t.c.run_at <= due_now,
                               sa.or_(t.c.ordering_key.is_(None),
                                      ~_key_blocked(due_now, relaxed=shape.relaxed)))
            .order_by(*order).limit(sa.bindparam(DUE_LIMIT, type_=sa.Integer)))
    if shape.critical_only:
        stmt = stmt.where(t.c.critical == sa.true())
    if shape.group is not None:
        stmt = stmt.where(t.c.group_key == shape.group)
    elif shape.default_group_excluding is not None:
        stmt = stmt.where(sa.or_(t.c.group_key.is_(None),
                                 t.c.group_key.not_in(list(shape.default_group_excluding))))
    return stmt


def _key_blocked(now: Any, *, relaxed: bool) -> sa.Exists:
    t, k = s.jobs, s.jobs.alias("key_head")
    earlier = sa.and_(k.c.status == s.QUEUED,
                      sa.tuple_(k.c.key_order_at, k.c.id) < sa.tuple_(t.c.key_order_at, t.c.id))
    if relaxed:
        earlier = sa.and_(earlier, sa.not_(sa.and_(k.c.attempt > 0, k.c.run_at > now)))
    return sa.exists().where(k.c.queue == t.c.queue, k.c.ordering_key == t.c.ordering_key,
                             sa.or_(k.c.status == s.RUNNING, earlier))


# -- where a queued job stands (why it waits) --------------------------------------------


def _key_ahead_query(job: Job, *, now: datetime, relaxed: bool) -> sa.Select[Any]:
    """The first job of ``job``'s ordering key, by (key_order_at, id), that holds it
    back as the due query sees it: running, or queued before it (``relaxed``: not
    one waiting for its retry at ``now``). The key's index in order, stopped at one."""
    t = s.jobs
    earlier = sa.and_(t.c.status == s.QUEUED, sa.tuple_(t.c.key_order_at, t.c.id) < sa.tuple_(
        sa.literal(job.key_order_at, s.UTCDateTime), sa.literal(job.id)))
    if relaxed:
        earlier = sa.and_(earlier, sa.not_(sa.and_(
            t.c.attempt > 0, t.c.run_at > sa.literal(now, s.UTCDateTime))))
    return (sa.select(t.c.id).where(t.c.queue == job.queue, t.c.ordering_key == job.ordering_key,
                                    t.c.id != job.id, sa.or_(t.c.status == s.RUNNING, earlier))
            .order_by(t.c.key_order_at, t.c.id).limit(1))


def _ahead_query(job: Job, *, now: datetime, ordering: Ordering, limit: int) -> sa.Select[Any]:
    """The due queued jobs before ``job`` in ``ordering``, at most ``limit``: the
    queue's order index (ix_jobs_due_time or ix_jobs_due_priority) read in its order."""
    t = s.jobs
    at, priority, job_id = (sa.literal(job.run_at, s.UTCDateTime), sa.literal(job.priority),
                            sa.literal(job.id))
    keys: tuple[sa.ColumnElement[Any], ...]
    mine: tuple[sa.ColumnElement[Any], ...]
    if ordering is Ordering.TIME_THEN_PRIORITY:
        keys, mine = (t.c.run_at, t.c.priority, t.c.id), (at, priority, job_id)
    else:
        keys, mine = (t.c.priority, t.c.run_at, t.c.id), (priority, at, job_id)
    return (sa.select(sa.literal(1))
            .where(t.c.queue == job.queue, t.c.status == s.QUEUED,
                   t.c.run_at <= sa.literal(now, s.UTCDateTime),
                   sa.tuple_(*keys) < sa.tuple_(*mine))
            .order_by(*keys).limit(limit))


# -- the listing of unmatched responses ---------------------------------------------------


def _bounded(column: sa.Column[Any], value_chars: int) -> tuple[sa.ColumnElement[Any], ...]:
    """(the value if its JSON text fits, else NULL; the cut text if it does not)."""
    text = sa.cast(column, sa.Text)  # the stored JSON text
    fits = sa.func.length(text) <= value_chars
    whole = sa.type_coerce(sa.case((fits, column), else_=sa.null()), s.JSON)
    cut = sa.case((fits, sa.null()), else_=sa.func.substr(text, 1, value_chars))
    return (whole.label(f"{column.name}_whole"),
            sa.type_coerce(cut, sa.Text).label(f"{column.name}_cut"))


def _entry_error(column: sa.Column[Any], chars: int) -> sa.Label[Any]:
    """A history entry's error as postgres.sql's ``history_last`` reads it: whole when
    its JSON text is at most ``chars`` long, else ``{kind, detail, truncated}`` cut."""
    is_object = sa.func.json_type(column) == "object"
    detail = sa.case((is_object, sa.func.json_extract(column, "$.detail")),
                     else_=sa.func.json_extract(column, "$"))
    cut = sa.func.json_object(
        "kind", sa.func.coalesce(sa.func.substr(sa.func.json_extract(column, "$.kind"), 1, 100),
                                 "response_failed"),
        "detail", sa.func.substr(detail, 1, chars), "truncated", sa.func.json("true"))
    fits = sa.func.coalesce(sa.func.length(sa.cast(column, sa.Text)), 0) <= chars
    return sa.type_coerce(sa.case((fits, column), else_=cut), s.JSON).label("error")


def listed_job_query(table: sa.Table, value_chars: int) -> sa.Select[Any]:
    """A row of ``table`` (``jobs`` or ``archived_jobs``) as a listing reads it: its
    columns but :data:`~hipq.store.listing.JOB_VALUES`, and each of those bounded."""
    kept = [c for c in table.c if c.name not in JOB_VALUES]
    return sa.select(*kept, *(part for name in JOB_VALUES
                              for part in _bounded(table.c[name], value_chars)))


def unmatched_query(*, limit: int, after: tuple[datetime, int] | None,
                    value_chars: int) -> sa.Select[Any]:
    """Unmatched responses, newest first: a range scan of ``ix_response_inbox_unmatched``
    (see :mod:`hipq.store.listing`)."""
    t = s.response_inbox
    stmt = (sa.select(t.c.id, t.c.correlation_key, t.c.attempt, t.c.status, t.c.source,
                      t.c.received_at, t.c.applied_at,
                      *(part for name in VALUES for part in _bounded(t.c[name], value_chars)))
            .where(t.c.outcome == s.UNMATCHED)
            .order_by(t.c.received_at.desc(), t.c.id.desc()).limit(limit))
    if after is not None:
        stmt = stmt.where(sa.tuple_(t.c.received_at, t.c.id) < sa.tuple_(
            sa.literal(after[0], s.UTCDateTime), sa.literal(after[1], s.BigId)))
    return stmt

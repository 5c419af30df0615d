"""The PostgreSQL driver (asyncpg): the hot paths of the reconcile loop and enqueue.

The shared statements (:mod:`hipq.store.common`) pass batches as expanding ``IN``
lists: one bind parameter per value, a new statement text per list length. Here a
batch travels as one array per column (``unnest``), each statement text is fixed
(asyncpg prepares it once per connection), rows of ``jobs`` are reached through the
primary key whatever the planner statistics say (see the head of ``postgres.sql``),
and work that only moves rows between tables (archiving, recording tries, marking
responses) stays inside the server: one round trip per step.

These statements run on the asyncpg connection under a pooled SQLAlchemy
connection (:meth:`PostgresStore._driver`): a single statement without a
transaction (it is atomic on its own: no BEGIN and COMMIT round trips), several in
one asyncpg transaction.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_dbapi as _adapted
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from hipq.errors import StoreError, TransientStoreError
from hipq.frozen import evolver
from hipq.jobs import Job, JobState
from hipq.store import pgsql
from hipq.store.common import JobKey, SQLAlchemyStore
from hipq.store.due import DUE_LIMIT, DUE_NOW, DueShape, due_query
from hipq.store.pgsql import SQL, to_json
from hipq.store.records import (
    Change,
    ChangeKind,
    InboxOutcome,
    InboxRow,
    InsertOutcome,
    InsertStatus,
    Response,
)
from hipq.store.rows import (
    CACHE_SIZE,
    chunks,
    inbox_ids_in_order,
    inbox_row,
    inbox_values,
    insert_outcome,
    job_from_row,
    jobs_from_rows,
)

log = logging.getLogger(__name__)

INSERT_CHUNK = 10_000  # jobs per INSERT: column arrays, one parameter per column

# a claimed job: the job as fetched, marked running by this try
_claimed = evolver(Job, ("status", "attempt", "correlation_key", "deadline", "launched_at",
                         "owner", "launch_confirmed", "updated_at"))
_END_OF = attrgetter("queue", "id", "attempt", "status", "result", "error", "outcome",
                     "response")
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_QUEUE_AND_ID = itemgetter("queue", "id")  # of a RETURNING row
_INBOX_COLUMNS = {"correlation_keys": "correlation_key", "attempts": "attempt",
                  "statuses": "status", "retryables": "retryable", "results": "result",
                  "errors": "error", "extend_seconds": "extend_seconds", "sources": "source",
                  "dedup_keys": "dedup_key", "received_ats": "received_at", "tokens": "token"}
_INBOX_JSON = frozenset({"result", "error"})


# the advisory lock key of ``migrate`` (any constant; "hipq" in ASCII)
MIGRATION_LOCK_KEY = 0x68697071
# the advisory lock key of recording late responses (any other constant; "hiql")
LATE_LOCK_KEY = 0x6869716C


class PostgresStore(SQLAlchemyStore):
    """The :class:`~hipq.store.base.Store` on PostgreSQL."""

    dialect = "postgresql"
    supports_row_locks = True
    _insert_into = postgresql.insert
    # errors of statements sent straight to asyncpg, as asyncpg raises them or as
    # SQLAlchemy's adapter translates them
    _transient = (*SQLAlchemyStore._transient,
                  asyncpg.PostgresConnectionError, asyncpg.InterfaceError,
                  asyncpg.InternalClientError, asyncpg.CannotConnectNowError,
                  asyncpg.AdminShutdownError, _adapted.InterfaceError,
                  _adapted.OperationalError, _adapted.InternalClientError)
    _conflicts = (*SQLAlchemyStore._conflicts, asyncpg.IntegrityConstraintViolationError)
    _errors = (*SQLAlchemyStore._errors, asyncpg.PostgresError)

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self._due_sql: dict[DueShape, pgsql.Compiled] = {}

    @asynccontextmanager
    async def _driver(self, *, transaction: bool = False) -> AsyncIterator[Any]:
        """The asyncpg connection of a pooled connection, in a transaction of its
        own if ``transaction`` (else each statement commits on its own)."""
        async with self._translated(), self.engine.connect() as conn:
            db = await _raw(conn)
            if not transaction:
                yield db
                return
            async with db.transaction():
                yield db

    async def _fetch(self, name: str, **values: Any) -> list[Any]:
        """One named statement's rows, on its own (no transaction)."""
        statement = SQL[name]
        async with self._driver() as db:
            rows: list[Any] = await db.fetch(statement.sql, *statement.args(**values))
        return rows

    async def _queue_rows(self) -> Sequence[Any]:
        return await self._fetch("queues")

    async def _migration_lock(self, conn: AsyncConnection) -> None:
        """Replicas starting together on an empty database migrate one at a time: a
        transaction-scoped advisory lock, released at commit; the next one then
        finds the schema made and changes nothing."""
        await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")

    async def _late_lock(self, conn: AsyncConnection) -> None:
        """Daemons recording late responses at once take turns (a transaction-scoped
        advisory lock, released at commit): each counts what the one before it
        recorded, so no try gets more than its bound. Late responses are rare: one
        lock for all of them costs nothing that matters."""
        await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({LATE_LOCK_KEY})")

    # -- enqueue -----------------------------------------------------------------------

    async def _insert_jobs(self, jobs: Sequence[Job]) -> dict[JobKey, InsertOutcome]:
        outcomes: dict[JobKey, InsertOutcome] = {}
        async with self._driver() as db:  # one statement per chunk, each atomic
            for chunk in chunks(jobs, INSERT_CHUNK):
                outcomes.update(await self._insert_chunk(db, chunk))
        return outcomes

    @staticmethod
    async def _insert_chunk(db: Any, unique: Sequence[Job]) -> dict[JobKey, InsertOutcome]:
        """One INSERT of column arrays, first without ON CONFLICT (a repeat of a live
        job is the rare case; it fails the statement, which then runs guarded); an
        id already archived is not inserted (it is answered as a repeat of the
        archived job). When every row went in, nothing is looked up."""
        insert = pgsql.insert_jobs(unique)
        try:
            rows = await db.fetch(insert.plain, *insert.params)
        except asyncpg.UniqueViolationError:
            rows = await db.fetch(insert.guarded, *insert.params)
        if len(rows) == len(unique):  # the common case: no lookups, no per-row checks
            created = InsertStatus.CREATED
            return {(job.queue, job.id): InsertOutcome(id=job.id, status=created, job=job)
                    for job in unique}
        inserted = {(r["queue"], r["id"]) for r in rows}
        missing: dict[str, list[str]] = {}
        for job in unique:
            if job.key not in inserted:
                missing.setdefault(job.queue, []).append(job.id)
        existing: dict[JobKey, Job] = {}
        for queue, ids in missing.items():  # repeats: what is stored, archived or live
            for name in ("archived_by_ids", "live_by_ids"):
                statement = SQL[name]
                for r in await db.fetch(statement.sql, *statement.args(queue=queue, ids=ids)):
                    existing.setdefault((r["queue"], r["id"]), job_from_row(r))
        return {job.key: insert_outcome(job, inserted, existing) for job in unique}

    # -- the reconcile loop --------------------------------------------------------------

    async def _fetch_due(self, shape: DueShape, *, now: datetime, limit: int) -> list[Job]:
        """The due query compiled once per shape; only ``now`` and the limit change
        from one tick to the next."""
        compiled = self._due_sql.get(shape)
        if compiled is None:
            if len(self._due_sql) >= CACHE_SIZE:  # queues come and go: stay bounded
                self._due_sql.clear()
            compiled = self._due_sql[shape] = pgsql.compile_select(
                due_query(shape, now=now, limit=limit), self.engine.dialect)
        async with self._driver() as db:
            rows = await db.fetch(compiled.sql, *compiled.params({DUE_NOW: now,
                                                                   DUE_LIMIT: limit}))
        return jobs_from_rows(rows)

    async def job_mark_running_many(self, *, queue: str, ids: Sequence[str], now: datetime,
                                    owner: str, heartbeat_seconds: float | None,
                                    rate_groups: Mapping[str, str] | None = None,
                                    known: Mapping[str, Job] | None = None) -> list[Job]:
        if not ids:
            return []
        claim = SQL["claim"].args(queue=queue, ids=list(ids), now=now, owner=owner,
                                  heartbeat_seconds=heartbeat_seconds)
        # rows: (id, attempt, correlation_key, deadline)
        if rate_groups:  # the launches count against the rate limit, atomically
            async with self._driver(transaction=True) as db:
                claimed = await db.fetch(SQL["claim"].sql, *claim)
                groups = [rate_groups[r[0]] for r in claimed if r[0] in rate_groups]
                if groups:
                    await db.execute(SQL["launch_events"].sql, *SQL["launch_events"].args(
                        queue=queue, now=now, group_keys=groups))
        else:
            async with self._driver() as db:
                claimed = await db.fetch(SQL["claim"].sql, *claim)
        known = known or {}
        unknown = [r[0] for r in claimed if r[0] not in known]
        if unknown:
            known = {**known, **{r["id"]: job_from_row(r) for r in await self._fetch(
                "live_by_ids", queue=queue, ids=unknown)}}
        running = JobState.RUNNING
        by_id = {r[0]: _claimed(known[r[0]], running, r[1], r[2], r[3], now, owner, False, now)
                 for r in claimed}
        return [by_id[i] for i in ids if i in by_id]

    async def job_confirm_launch_many(self, *, keys: Sequence[tuple[str, str, int]],
                                      owner: str) -> int:
        if not keys:
            return 0
        confirm = SQL["confirm"]
        async with self._driver() as db:
            status = await db.execute(confirm.sql, *confirm.args(
                queues=[q for q, _, _ in keys], ids=[i for _, i, _ in keys],
                attempts=[a for _, _, a in keys], owner=owner))
        return int(status.rsplit(" ", 1)[-1])

    async def jobs_vacuum(self) -> bool:
        """``VACUUM`` the hot ``jobs`` table (skipped if another vacuum holds it).
        Every job is inserted, updated and deleted there, so between autovacuum runs
        (a minute apart at best) its indexes fill with entries of jobs long gone,
        which every insert and due-jobs scan then steps over."""
        try:
            async with self._driver() as db:
                await db.execute(SQL["vacuum"].sql)
        except TransientStoreError:
            raise
        except StoreError as exc:  # e.g. a role that may not vacuum
            log.warning("cannot vacuum the jobs table (%s); leaving it to autovacuum", exc,
                        extra={"action": "vacuum_refused"})
            return False
        return True

    # -- step 3: persisting the batch ------------------------------------------------------

    async def persist_batch(self, *, changes: Sequence[Change], owner: str, now: datetime,
                            inbox: Sequence[tuple[int, InboxOutcome]] = ()
                            ) -> set[JobKey]:
        """One statement per kind of change (which also marks the responses of the
        changes that applied), each guarded by owner and attempt so what it returns
        is what applied. One statement needs no transaction; several share one."""
        if not changes and not inbox:
            return set()
        calls = _persist_calls(changes, owner, now)
        mark = SQL["inbox_mark"]
        calls.extend((mark.sql, mark.args(**values)) for values in _marks(inbox, now))
        applied: set[JobKey] = set()
        async with self._driver(transaction=len(calls) > 1) as db:
            for sql, args in calls:
                applied.update(map(_QUEUE_AND_ID, await db.fetch(sql, *args)))
        return applied

    # -- the response inbox ----------------------------------------------------------------

    async def inbox_insert_many(self, responses: Sequence[Response], *,
                                now: datetime) -> list[int | None]:
        if not responses:
            return []
        rows = [inbox_values(r, now) for r in responses]
        columns = {name: [to_json(r[c]) for r in rows] if c in _INBOX_JSON
                   else [r[c] for r in rows] for name, c in _INBOX_COLUMNS.items()}
        return inbox_ids_in_order(responses, await self._fetch("inbox_insert", **columns))

    async def inbox_pending_for_keys(self, keys: Sequence[str]) -> list[InboxRow]:
        if not keys:
            return []
        return [inbox_row(r) for r in await self._fetch("inbox_pending_for_keys",
                                                        keys=list(keys))]

    async def job_expired_sweep(self, *, now: datetime, limit: int) -> list[Job]:
        # once a second, and the answer is usually "none": asked on the driver,
        # without a transaction, before the sweep's own
        if not await self._fetch("expired_any", now=now):
            return []
        return await super().job_expired_sweep(now=now, limit=limit)

    async def inbox_pending_scan(self, *, after_id: int, before: datetime,
                                 limit: int) -> list[InboxRow]:
        # on the driver: every tick runs it, and SQLAlchemy's Core round trip cost
        # more CPU than the statement (an idle daemon's largest share)
        return [inbox_row(r) for r in await self._fetch(
            "inbox_pending_scan", after_id=after_id, before=before, limit=limit)]

    async def inbox_mark_many(self, marks: Sequence[tuple[int, InboxOutcome]], *,
                              now: datetime) -> None:
        groups = _marks(marks, now)
        if not groups:
            return
        mark = SQL["inbox_mark"]
        async with self._driver(transaction=len(groups) > 1) as db:
            for values in groups:
                await db.execute(mark.sql, *mark.args(**values))

    async def job_keys_lookup(self, keys: Sequence[str]) -> dict[str, Job]:
        if not keys:
            return {}
        return {r["correlation_key"]: job_from_row(r)
                for r in await self._fetch("jobs_by_keys", keys=list(keys))}


def inbox_of(changes: Sequence[Change]) -> tuple[list[int], list[str], list[str]]:
    """The responses these changes apply: (inbox ids, their queues, their job ids)."""
    pairs = [(i, c.queue, c.id) for c in changes for i in c.inbox_ids]
    return [i for i, _, _ in pairs], [q for _, q, _ in pairs], [j for _, _, j in pairs]


async def _raw(conn: AsyncConnection) -> Any:
    """The asyncpg connection under a SQLAlchemy connection."""
    return (await conn.get_raw_connection()).driver_connection


def _marks(marks: Sequence[tuple[int, InboxOutcome]], now: datetime) -> list[dict[str, Any]]:
    """The values of the ``inbox_mark`` statement, one set per outcome."""
    ids: dict[str, list[int]] = {}
    for inbox_id, outcome in marks:
        ids.setdefault(str(outcome), []).append(inbox_id)
    return [{"ids": group, "outcome": outcome, "now": now} for outcome, group in ids.items()]


def _persist_calls(changes: Sequence[Change], owner: str,
                   now: datetime) -> list[tuple[str, list[Any]]]:
    """The (statement, arguments) of each kind of change in ``changes``."""
    j = to_json
    calls: list[tuple[str, list[Any]]] = []
    for kind in ChangeKind:
        batch = [c for c in changes if c.kind is kind]
        if not batch:
            continue
        ids, queues, jobs = inbox_of(batch)
        common = {"owner": owner, "now": now, "inbox_ids": ids, "inbox_queues": queues,
                  "inbox_jobs": jobs}
        if kind is ChangeKind.ARCHIVE:
            values: dict[str, Any] = {"ends": _ENCODE(list(map(_END_OF, batch)))}
        else:
            values = {"queues": [c.queue for c in batch], "ids": [c.id for c in batch],
                      "attempts": [c.attempt for c in batch]}
            if kind is ChangeKind.REQUEUE:
                values |= {"run_ats": [c.run_at for c in batch],
                           "datas": [j(c.data) for c in batch],
                           "errors": [j(c.error) for c in batch],
                           "outcomes": [c.outcome or "unknown" for c in batch],
                           "responses": [j(c.response) for c in batch],
                           "keys": [c.correlation_key for c in batch]}
            else:
                values["deadlines"] = [c.deadline for c in batch]
        statement = SQL[str(kind)]
        calls.append((statement.sql, statement.args(**common, **values)))
    return calls


def create_engine(url: str, *, pool_size: int) -> AsyncEngine:
    """An engine of ``pool_size`` connections, no more.

    No pre-ping (it costs a BEGIN, a query and a ROLLBACK per checkout): a
    connection found dead fails its transaction (a TransientStoreError the caller
    retries), and SQLAlchemy then invalidates the whole pool, so the next checkout
    after a database restart gets a fresh connection. No overflow: connections
    beyond pool_size are closed when returned, so under load a busy API would open
    (and TLS-probe, and re-prepare statements on) a new connection per request;
    requests wait for a pooled one instead."""
    return create_async_engine(url, pool_size=pool_size, max_overflow=0,
                               connect_args={"timeout": 10})


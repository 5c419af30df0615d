"""The PostgreSQL driver: every statement is a named block of ``postgres.sql``, run
on asyncpg (:mod:`hipq.store.pgsql` loads them; the schema comes from the numbered
files of ``hipq/store/migrations/postgresql/``).

A batch travels as one array per column (``unnest``), so each statement text is
fixed (asyncpg prepares it once per connection), rows of ``jobs`` are reached
through the primary key whatever the planner statistics say (see the head of
``postgres.sql``), and work that only moves rows between tables (archiving,
recording tries, marking responses) stays inside the server: one round trip per
step.

Connections come from an asyncpg pool (:mod:`hipq.store.pg_connections`,
:mod:`hipq.store.pg_pool`); SQLAlchemy is never imported on this path (only
``PostgresStore.engine``, for tools and tests, loads it). A single statement
runs without a transaction (it is atomic on its own: no BEGIN and COMMIT round
trips), several in one asyncpg transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime, timedelta
from operator import attrgetter, itemgetter
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from hipq import json_text
from hipq.errors import StoreError, TransientStoreError
from hipq.frozen import evolver
from hipq.jobs import Attempt, Job, JobState, NewJobs, Ordering, expired_error
from hipq.store import pg_pool
from hipq.store import versions as s
from hipq.store.driver import VERSION_KEY, JobKey, QueueCounts
from hipq.store.due import RELAXED, DueShape
from hipq.store.history import (
    LATE,
    entry_of,
    history_of,
    late_values,
    try_of,
    within_late_bound,
)
from hipq.store.listing import ENTRY_ERROR_CHARS, listed_job, listed_response
from hipq.store.pg_connections import PgConnections
from hipq.store.pg_persist import ends_parts, marks_of, persist_calls
from hipq.store.pgsql import SQL, insert_jobs_call, to_json
from hipq.store.postgres_intake import IntakeStatements
from hipq.store.postgres_partner import PartnerStatements
from hipq.store.postgres_seen import SeenStatements
from hipq.store.records import (
    Change,
    InboxOutcome,
    InboxPage,
    InboxRow,
    InsertOutcome,
    InsertStatus,
    JobHistory,
    ListedJob,
    ListedResponse,
    QueueRecord,
    Response,
)
from hipq.store.rows import (
    NO_BOUND,
    chunks,
    inbox_ids_in_order,
    inbox_page,
    inbox_row,
    insert_outcome,
    job_from_row,
    jobs_from_rows,
    merged_into,
    merged_outcome,
    queue_record,
    stored_settings,
)

log = logging.getLogger(__name__)

INSERT_CHUNK = 10_000  # jobs per INSERT: column arrays, one parameter per column
# a new job's outcome once its row went in: this one with the job's id and the job
_CREATED = InsertOutcome(id="", status=InsertStatus.CREATED)
_created = evolver(InsertOutcome, ("id", "job"))

# a claimed job: the job as fetched, marked running by this try
_claimed = evolver(Job, ("status", "attempt", "correlation_key", "deadline", "launched_at",
                         "owner", "launch_confirmed", "updated_at"))
_ENCODE = json_text.compact
_QUEUE_AND_ID = itemgetter("queue", "id")  # of a RETURNING row
# a due page's key to start after, for the queue's first page (see "due_time")
_FROM_THE_FIRST = {"after_priority": None, "after_run_at": None, "after_id": None}
SKIPPED_ROUNDS = 2  # step 3: changes sent again after a concurrent update skipped them
# a response as a row of the inbox_insert statement's JSON array
_INBOX_ROW = attrgetter("correlation_key", "attempt", "status", "retryable", "result",
                        "error", "extend_seconds", "source", "dedup_key", "token")
# the keyset of each live listing, in the order of its sort key
_LIVE_PAGES = {"running": ("live_running_page", ("after_at", "after_id")),
               Ordering.TIME_THEN_PRIORITY: ("live_queued_time_page",
                                             ("after_at", "after_priority", "after_id")),
               Ordering.PRIORITY_THEN_TIME: ("live_queued_priority_page",
                                             ("after_priority", "after_at", "after_id"))}

# the advisory lock key of ``migrate`` (any constant; "hipq" in ASCII)
MIGRATION_LOCK_KEY = 0x68697071
# the advisory lock key of recording late responses (any other constant; "hiql")
LATE_LOCK_KEY = 0x6869716C


def _data_texts(jobs: Sequence[Job]) -> Sequence[str] | None:
    """The JSON text of each job's data, when the caller has it (NewJobs)."""
    return jobs.data_texts if isinstance(jobs, NewJobs) else None


async def _fetch(db: Any, name: str, **values: Any) -> list[Any]:
    """The rows of the named statement on the asyncpg connection ``db``."""
    statement = SQL[name]
    rows: list[Any] = await db.fetch(statement.sql, *statement.args(**values))
    return rows


async def _fetchrow(db: Any, name: str, **values: Any) -> Any:
    statement = SQL[name]
    return await db.fetchrow(statement.sql, *statement.args(**values))


async def _execute(db: Any, name: str, **values: Any) -> int:
    """Run the named statement; how many rows it changed."""
    statement = SQL[name]
    status: str = await db.execute(statement.sql, *statement.args(**values))
    return int(status.rsplit(" ", 1)[-1]) if status[-1:].isdigit() else 0


async def _version(db: Any) -> int | None:
    """The schema version recorded in ``hipq_meta`` (None: no table, or no row)."""
    if not (await _fetchrow(db, "meta_exists"))[0]:
        return None
    row = await _fetchrow(db, "meta_get", key=VERSION_KEY)
    return None if row is None else int(row["value"])


async def _stored(db: Any, queue: str, job_id: str) -> Job | None:
    """The job (queue, id), live, or else archived."""
    for name in ("live_by_ids", "archived_by_ids"):
        rows = await _fetch(db, name, queue=queue, ids=[job_id])
        if rows:
            return job_from_row(rows[0])
    return None


async def _listed(db: Any, queue: str, job_id: str, value_chars: int) -> ListedJob | None:
    """The job (queue, id), live, or else archived, its large values cut."""
    for name in ("live_listed", "archived_listed"):
        row = await _fetchrow(db, name, queue=queue, id=job_id, value_chars=value_chars)
        if row is not None:
            return listed_job(row)
    return None


class PostgresStore(IntakeStatements, PartnerStatements, SeenStatements, PgConnections):
    """The :class:`~hipq.store.base.Store` on PostgreSQL (its pool, errors and
    checkouts: :class:`~hipq.store.pg_connections.PgConnections`)."""

    dialect = "postgresql"
    supports_row_locks = True
    supports_reads_beside_writes = True
    supports_notify = True

    async def _fetch(self, name: str, **values: Any) -> list[Any]:
        """One named statement's rows, on its own (no transaction)."""
        async with self._driver() as db:
            return await _fetch(db, name, **values)

    async def _fetchrow(self, name: str, **values: Any) -> Any:
        async with self._driver() as db:
            return await _fetchrow(db, name, **values)

    async def _execute(self, name: str, **values: Any) -> int:
        async with self._driver() as db:
            return await _execute(db, name, **values)

    # -- lifecycle -------------------------------------------------------------------

    async def ping(self) -> None:
        await self._fetch("ping")

    async def migrate(self) -> int:
        """The numbered files above the recorded version, in one transaction, after
        an advisory lock: replicas starting together on an empty database migrate
        one at a time (the next one then finds the schema made and runs nothing)."""
        async with self._driver(transaction=True) as db:
            await _fetch(db, "advisory_lock", key=MIGRATION_LOCK_KEY)
            for migration in s.pending(self.dialect, await _version(db)):
                await db.execute(migration.sql)  # a script: no parameters
            await _execute(db, "meta_set", key=VERSION_KEY, value=str(s.SCHEMA_VERSION))
        return s.SCHEMA_VERSION

    async def _read_version(self) -> int | None:
        async with self._driver() as db:
            return await _version(db)

    async def meta_get_or_set(self, key: str, value: str) -> str:
        async with self._driver() as db:
            await _execute(db, "meta_add", key=key, value=value)
            row = await _fetchrow(db, "meta_get", key=key)
        return str(row["value"])

    # -- queues ----------------------------------------------------------------------

    async def queue_upsert(self, settings: Mapping[str, Any], *, now: datetime) -> bool:
        queue_id, body, paused = stored_settings(settings)
        row = await self._fetchrow("queue_upsert", id=queue_id, config=to_json(body),
                                   paused=paused, now=now)
        return bool(row["created"])

    async def queue_get(self, queue_id: str) -> QueueRecord | None:
        row = await self._fetchrow("queue_get", id=queue_id)
        return None if row is None else queue_record(row)

    async def _queue_rows(self) -> Sequence[Any]:
        return await self._fetch("queues")

    async def queue_set_paused(self, queue_id: str, paused: bool, *, now: datetime) -> bool:
        return bool(await self._execute("queue_set_paused", id=queue_id, paused=paused, now=now))

    # -- enqueue -----------------------------------------------------------------------

    async def job_insert_many(self, new_jobs: Sequence[Job]) -> list[InsertOutcome]:
        """:meth:`DriverBase.job_insert_many`; the usual batch (one chunk, one queue,
        each id once) is answered in its order, without outcomes by key."""
        if (len(new_jobs) > INSERT_CHUNK or len({job.queue for job in new_jobs}) > 1
                or len({job.id for job in new_jobs}) != len(new_jobs)):
            return await super().job_insert_many(new_jobs)
        if not new_jobs:
            return []
        async with self._driver() as db:
            return await self._insert_chunk(db, new_jobs, _data_texts(new_jobs))

    async def _insert_jobs(self, jobs: Sequence[Job]) -> dict[JobKey, InsertOutcome]:
        outcomes: dict[JobKey, InsertOutcome] = {}
        texts = _data_texts(jobs)
        text_chunks = None if texts is None else iter(chunks(texts, INSERT_CHUNK))
        async with self._driver() as db:  # one statement per chunk, each atomic
            for chunk in chunks(jobs, INSERT_CHUNK):
                chunk_texts = None if text_chunks is None else next(text_chunks)
                answers = await self._insert_chunk(db, chunk, chunk_texts)
                outcomes.update(zip((job.key for job in chunk), answers, strict=True))
        return outcomes

    @staticmethod
    async def _insert_chunk(db: Any, unique: Sequence[Job],
                            data_texts: Sequence[str] | None) -> list[InsertOutcome]:
        """One INSERT of column arrays (text columns packed), first without ON
        CONFLICT (a repeat of a live job is the rare case; it fails the statement,
        which then runs guarded); an id already archived is not inserted (it is
        answered as a repeat of the archived job). When every row went in, nothing
        is looked up. ``data_texts``: the jobs' data as JSON text, if known. The
        outcomes come in the order of ``unique`` (jobs of distinct keys)."""
        sql, args = insert_jobs_call(unique, guarded=False, data_texts=data_texts, packed=True)
        try:
            rows = await db.fetch(sql, *args)
        except asyncpg.UniqueViolationError:
            sql, args = insert_jobs_call(unique, guarded=True, data_texts=data_texts,
                                         packed=True)
            rows = await db.fetch(sql, *args)
        if len(rows) == len(unique):  # the common case: no lookups, no per-row checks
            return [_created(_CREATED, job.id, job) for job in unique]
        inserted = {(r["queue"], r["id"]) for r in rows}
        missing: dict[str, list[str]] = {}
        for job in unique:
            if job.key not in inserted:
                missing.setdefault(job.queue, []).append(job.id)
        existing: dict[JobKey, Job] = {}
        for queue, ids in missing.items():  # repeats: what is stored, archived or live
            for name in ("archived_by_ids", "live_by_ids"):
                for r in await _fetch(db, name, queue=queue, ids=ids):
                    existing.setdefault((r["queue"], r["id"]), job_from_row(r))
        return [insert_outcome(job, inserted, existing) for job in unique]

    async def job_merge(self, job: Job) -> InsertOutcome:
        async with self._driver(transaction=True) as db:
            merged = await _fetchrow(db, "merged_get", queue=job.queue, id=job.id)
            if merged is not None:  # a repeat of a job merged into another
                host = await _stored(db, job.queue, merged["into_id"])
                return merged_outcome(job, merged["body_hash"], host)
            found = await _stored(db, job.queue, job.id)
            if found is not None:
                return insert_outcome(job, set(), {job.key: found})
            row = await _fetchrow(db, "merge_host", queue=job.queue,
                                  ordering_key=job.ordering_key)
            if row is not None:
                into = merged_into(job_from_row(row), job)
                await _execute(db, "merge_update", queue=into.queue, id=into.id,
                               data=to_json(into.data), now=into.updated_at)
                await _execute(db, "merged_insert", queue=job.queue, id=job.id,
                               into_id=into.id, body_hash=job.body_hash,
                               created_at=job.created_at)
                return InsertOutcome(id=job.id, status=InsertStatus.CREATED, job=into)
        (outcome,) = await self.job_insert_many([job])
        return outcome

    # -- reading jobs ------------------------------------------------------------------

    async def job_get(self, queue: str, job_id: str) -> Job | None:
        async with self._driver() as db:
            job = await _stored(db, queue, job_id)
            if job is None:
                merged = await _fetchrow(db, "merged_get", queue=queue, id=job_id)
                if merged is not None:
                    job = await _stored(db, queue, merged["into_id"])
        return job

    async def job_get_listed(self, queue: str, job_id: str, *,
                             value_chars: int) -> ListedJob | None:
        # job_get's lookups, each reading the large values cut (hipq.store.listing)
        async with self._driver() as db:
            found = await _listed(db, queue, job_id, value_chars)
            if found is None:
                merged = await _fetchrow(db, "merged_get", queue=queue, id=job_id)
                if merged is not None:
                    found = await _listed(db, queue, merged["into_id"], value_chars)
        return found

    async def job_attempts(self, queue: str, job_id: str) -> list[Attempt]:
        return [entry_of(r) for r in await self._fetch("job_attempts", queue=queue,
                                                        job_id=job_id)]

    async def job_history(self, queue: str, job_id: str, *, limit: int) -> JobHistory:
        async with self._driver() as db:
            rows = await _fetch(db, "history_last", queue=queue, job_id=job_id, limit=limit,
                                error_chars=ENTRY_ERROR_CHARS)
            total = await _fetchrow(db, "history_count", queue=queue, job_id=job_id)
        return history_of(rows, total[0])

    async def job_list_archived(self, *, queue: str | None = None, status: str | None = None,
                                limit: int = 100,
                                after: tuple[datetime, str, str] | None = None) -> list[Job]:
        at, after_queue, after_id = after if after is not None else (None, None, None)
        values: dict[str, Any] = {"limit": limit, "after_at": at, "after_queue": after_queue,
                                  "after_id": after_id}
        name = "archived_page"
        if queue:
            name, values["queue"] = f"{name}_queue", queue
        if status == JobState.SUCCEEDED.value and not queue:  # most rows: by finishing time
            name = "archived_page_succeeded"
        elif status:
            name, values["status"] = f"{name}_status", status
        return jobs_from_rows(await self._fetch(name, **values))

    async def job_list_live(self, *, queue: str, state: str, ordering: Ordering,
                            limit: int, after: Sequence[Any] | None = None) -> list[Job]:
        name, keys = _LIVE_PAGES["running" if state == JobState.RUNNING.value else ordering]
        values = dict(zip(keys, after if after is not None else [None] * len(keys),
                          strict=True))
        return jobs_from_rows(await self._fetch(name, queue=queue, limit=limit, **values))

    async def job_load_running(self, *, queue: str, ids: Sequence[str] | None = None,
                               after_id: str | None = None,
                               limit: int | None = None) -> list[Job]:
        if ids is None:
            rows = await self._fetch("running_page", queue=queue, after_id=after_id, limit=limit)
        else:
            rows = await self._fetch("running_by_ids", queue=queue, ids=list(ids),
                                     after_id=after_id, limit=limit)
        return jobs_from_rows(rows)

    async def job_keys_lookup(self, keys: Sequence[str]) -> dict[str, Job]:
        if not keys:
            return {}
        return {r["correlation_key"]: job_from_row(r)
                for r in await self._fetch("jobs_by_keys", keys=list(keys))}

    # -- the reconcile loop --------------------------------------------------------------

    async def _fetch_due(self, shape: DueShape, *, now: datetime, limit: int) -> list[Job]:
        """One of the ``due_*`` blocks, by the shape (only ``now`` and the limit
        change from one tick to the next)."""
        order = "critical" if shape.critical_only else "time" if shape.by_time else "priority"
        values: dict[str, Any] = {"queue": shape.queue, "now": now, "limit": limit,
                                  "relaxed": shape.relaxed}
        if shape.group is not None:
            name, values["group"] = f"due_group_{order}", shape.group
        else:
            name, values["excluding"] = f"due_{order}", list(shape.default_group_excluding or ())
            if not shape.critical_only:  # from the first due job on (job_fetch_due_after)
                values |= _FROM_THE_FIRST
        return jobs_from_rows(await self._fetch(name, **values))

    async def job_fetch_due_after(self, *, queue: str, now: datetime, limit: int,
                                  ordering: Ordering, after: Job, ran: AbstractSet[str],
                                  key_mode: str = "strict") -> list[Job] | None:
        """Two reads side by side: the page after ``after`` (an index range that
        starts there), and the ids up to it (one column, not whole rows: the jobs
        that ran are not read again). Each has its own snapshot; a job enqueued
        ahead in between is in neither, and in the next page's ids (which reach
        further): it waits one page, never more."""
        order = "time" if ordering is Ordering.TIME_THEN_PRIORITY else "priority"
        key = {"queue": queue, "now": now, "after_priority": after.priority,
               "after_run_at": after.run_at, "after_id": after.id}
        head, page = await asyncio.gather(
            self._fetch(f"due_head_{order}", limit=len(ran) + 1, **key),
            self._fetch(f"due_{order}", limit=limit, relaxed=key_mode == RELAXED, excluding=[],
                        **key))
        if any(r["id"] not in ran for r in head):
            return None
        return jobs_from_rows(page)

    async def job_count_due(self, *, queue: str, now: datetime, limit: int) -> int:
        row = await self._fetchrow("count_due", queue=queue, now=now, limit=limit)
        return int(row["n"])

    async def launch_events_recent(self, *, queue: str,
                                   since: datetime) -> dict[str, list[datetime]]:
        out: dict[str, list[datetime]] = {}
        for r in await self._fetch("launch_events_recent", queue=queue, since=since):
            out.setdefault(r["group_key"], []).append(r["launched_at"])
        return out

    async def launch_events_restamp(self, *, queue: str, at: datetime) -> int:
        return await self._execute("launch_events_restamp", queue=queue, at=at)

    async def launch_events_replace(self, *, queue: str, since: datetime,
                                    events: Sequence[tuple[str, datetime]]) -> None:
        await self._execute("launch_events_replace", queue=queue, since=since,
                            group_keys=[g for g, _ in events], times=[t for _, t in events])

    async def job_mark_running_many(self, *, queue: str, ids: Sequence[str], now: datetime,
                                    owner: str, heartbeat_seconds: float | None,
                                    rate_groups: Mapping[str, str] | None = None,
                                    known: Mapping[str, Job] | None = None) -> list[Job]:
        if not ids:
            return []
        claim = {"queue": queue, "ids": list(ids), "now": now, "owner": owner,
                 "heartbeat_seconds": heartbeat_seconds}
        # rows: (id, attempt, correlation_key, deadline)
        if rate_groups:  # the launches count against the rate limit, atomically
            async with self._driver(transaction=True) as db:
                claimed = await _fetch(db, "claim", **claim)
                groups = [rate_groups[r[0]] for r in claimed if r[0] in rate_groups]
                if groups:
                    await _execute(db, "launch_events", queue=queue, now=now, group_keys=groups)
        else:
            claimed = await self._fetch("claim", **claim)
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
        return await self._execute("confirm", queues=[q for q, _, _ in keys],
                                   ids=[i for _, i, _ in keys],
                                   attempts=[a for _, _, a in keys], owner=owner)

    async def jobs_vacuum(self) -> bool:
        """``VACUUM`` the hot ``jobs`` table (skipped if another vacuum holds it).
        Every job is inserted, updated and deleted there, so between autovacuum runs
        (a minute apart at best) its indexes fill with entries of jobs long gone,
        which every insert and due-jobs scan then steps over."""
        try:
            await self._execute("vacuum")
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
        is what applied. One statement needs no transaction; several share one.

        The statements address each row by the ctid their lookup found. A row that
        another transaction changed meanwhile (a launch confirmation, say) has a new
        ctid by the time the statement gets its lock, and PostgreSQL skips it without
        an error; such a change is sent again, its row looked up afresh by key, where
        the guards decide as before (:data:`SKIPPED_ROUNDS` times at most)."""
        if not changes and not inbox:
            return set()
        calls = persist_calls(changes, owner, now)
        mark = SQL["inbox_mark"]
        calls.extend((mark.sql, mark.args(**values)) for values in marks_of(inbox, now))
        applied: set[JobKey] = set()
        async with self._driver(transaction=len(calls) > 1) as db:
            for sql, args in calls:
                applied.update(map(_QUEUE_AND_ID, await db.fetch(sql, *args)))
            for _ in range(SKIPPED_ROUNDS):
                missed = [c for c in changes if (c.queue, c.id) not in applied]
                if not missed:
                    break
                before = len(applied)
                for sql, args in persist_calls(missed, owner, now):
                    applied.update(map(_QUEUE_AND_ID, await db.fetch(sql, *args)))
                if len(applied) == before:  # what is left no longer holds: not ours
                    break
        return applied

    async def job_archive_ran_many(self, *, queue: str, changes: Sequence[Change],
                                   owner: str, now: datetime,
                                   heartbeat_seconds: float | None) -> set[JobKey]:
        """One statement (``archive_ran``): the claim and the end of each try, with no
        running row in between; a row changed or locked meanwhile is left alone."""
        if not changes:
            return set()
        parts = ends_parts(changes)
        applied: set[JobKey] = set()
        async with self._driver(transaction=len(parts) > 1) as db:
            for _, ends in parts:
                applied.update(map(_QUEUE_AND_ID, await _fetch(
                    db, "archive_ran", ends=ends, owner=owner, now=now,
                    heartbeat_seconds=heartbeat_seconds)))
        return applied

    # -- queued and adopted jobs ---------------------------------------------------------

    async def job_adopt_running(self, *, queue: str, owner: str, now: datetime) -> int:
        return await self._execute("adopt_running", queue=queue, owner=owner, now=now)

    async def job_reschedule_many(self, *, queue: str, run_ats: dict[str, datetime],
                                  now: datetime) -> int:
        if not run_ats:
            return 0
        return await self._execute("reschedule", queue=queue, ids=list(run_ats),
                                   run_ats=list(run_ats.values()), now=now)

    async def job_archive_queued_many(self, *, queue: str, ends: dict[str, tuple[str, Any]],
                                      now: datetime) -> list[Job]:
        if not ends:
            return []
        rows = await self._fetch("archive_queued", queue=queue, ids=list(ends),
                                 statuses=[status for status, _ in ends.values()],
                                 errors=[to_json(error) for _, error in ends.values()], now=now)
        return [job_from_row(r).evolve(status=JobState(ends[r["id"]][0]), error=ends[r["id"]][1],
                                       updated_at=now, finished_at=now) for r in rows]

    async def job_expired_sweep(self, *, now: datetime, limit: int) -> list[Job]:
        error = expired_error().to_json()
        async with self._driver() as db:
            # once a second, and the answer is usually "none": one indexed probe
            if not await _fetch(db, "expired_any", now=now):
                return []
            rows = await _fetch(db, "expire", now=now, limit=limit, error=to_json(error))
        return [job_from_row(r).evolve(status=JobState.EXPIRED, error=error, updated_at=now,
                                       finished_at=now) for r in rows]

    # -- the response inbox and late responses -------------------------------------------

    async def inbox_insert_many(self, responses: Sequence[Response], *,
                                now: datetime) -> list[int | None]:
        if not responses:
            return []
        rows = _ENCODE(list(map(_INBOX_ROW, responses)))
        return inbox_ids_in_order(responses, await self._fetch(
            "inbox_insert", responses=rows, received_at=now))

    async def inbox_pending_for_keys(self, keys: Sequence[str]) -> list[InboxRow]:
        if not keys:
            return []
        return [inbox_row(r) for r in await self._fetch("inbox_pending_for_keys",
                                                        keys=list(keys))]

    async def inbox_pending_scan(self, *, after_id: int, before: datetime, limit: int,
                                 max_chars: int | None = None) -> InboxPage:
        rows = await self._fetch("inbox_pending_scan", after_id=after_id, before=before,
                                 limit=limit, max_chars=NO_BOUND if max_chars is None
                                 else max_chars)
        return inbox_page(rows, limit)

    async def inbox_mark_many(self, marks: Sequence[tuple[int, InboxOutcome]], *,
                              now: datetime) -> None:
        groups = marks_of(marks, now)
        if not groups:
            return
        async with self._driver(transaction=len(groups) > 1) as db:
            for values in groups:
                await _execute(db, "inbox_mark", **values)

    async def inbox_list_unmatched(self, *, limit: int = 100,
                                   after: tuple[datetime, int] | None = None,
                                   value_chars: int = 4096) -> list[ListedResponse]:
        at, after_id = after if after is not None else (None, None)
        return [listed_response(r) for r in await self._fetch(
            "unmatched_page", limit=limit, value_chars=value_chars, after_at=at,
            after_id=after_id)]

    async def archived_by_attempt_keys(self, keys: Sequence[str]) -> dict[str, tuple[str, str]]:
        if not keys:
            return {}
        return {r["correlation_key"]: (r["queue"], r["job_id"])
                for r in await self._fetch("attempt_keys", keys=list(keys))}

    async def attempt_record_late_many(self, rows: Sequence[tuple[str, str, InboxRow]], *,
                                       now: datetime) -> None:
        """Daemons recording late responses at once take turns (a transaction-scoped
        advisory lock, released at commit): each counts what the one before it
        recorded, so no try gets more than its bound. Late responses are rare: one
        lock for all of them costs nothing that matters."""
        if not rows:
            return
        async with self._driver(transaction=True) as db:
            await _fetch(db, "advisory_lock", key=LATE_LOCK_KEY)
            latest = {r["correlation_key"]: r["attempt"] for r in await _fetch(
                db, "late_tries", keys=list({r.correlation_key for _, _, r in rows}))}
            values = late_values(rows, latest, now)
            tries = sorted({try_of(v) for v in values})
            recorded = Counter({(r["queue"], r["job_id"], r["attempt"]): r["n"]
                                for r in await _fetch(
                db, "late_counts", queues=[q for q, _, _ in tries],
                job_ids=[j for _, j, _ in tries], attempts=[a for _, _, a in tries],
                outcome=LATE)})
            kept = within_late_bound(values, recorded)
            if kept:
                await _execute(db, "late_insert", now=now, outcome=LATE,
                               queues=[v["queue"] for v in kept],
                               job_ids=[v["job_id"] for v in kept],
                               attempts=[v["attempt"] for v in kept],
                               keys=[v["correlation_key"] for v in kept],
                               errors=[to_json(v["error"]) for v in kept],
                               responses=[to_json(v["response"]) for v in kept])

    # -- leases and membership -----------------------------------------------------------

    async def lease_acquire_many(self, *, queues: Sequence[str], owner: str, now: datetime,
                                 seconds: float) -> set[str]:
        if not queues:
            return set()
        return {r["queue"] for r in await self._fetch(
            "lease_acquire", queues=list(queues), owner=owner, now=now,
            expires=now + timedelta(seconds=seconds))}

    async def lease_release_all(self, *, owner: str) -> int:
        return await self._execute("lease_release_all", owner=owner)

    async def lease_release_many(self, *, queues: Sequence[str], owner: str) -> int:
        if not queues:
            return 0
        return await self._execute("lease_release", queues=list(queues), owner=owner)

    async def lease_list(self) -> dict[str, tuple[str, datetime]]:
        return {r["queue"]: (r["owner"], r["expires_at"]) for r in await self._fetch("lease_list")}

    async def daemon_heartbeat(self, *, owner: str, now: datetime,
                               seconds: float) -> list[str]:
        return [r["owner"] for r in await self._fetch(
            "daemon_heartbeat", owner=owner, now=now, expires=now + timedelta(seconds=seconds),
            forget_before=now - timedelta(seconds=seconds))]  # long gone: nobody needs them

    async def daemon_leave(self, *, owner: str) -> None:
        await self._execute("daemon_leave", owner=owner)

    # -- stats and housekeeping ----------------------------------------------------------

    async def _queue_counts(self, now: datetime) -> dict[str, QueueCounts]:
        return {r["queue"]: (r["queued"], r["due"], r["running"], r["running_weight"],
                             r["oldest_due"]) for r in await self._fetch("queue_counts", now=now)}

    async def inbox_counts(self) -> dict[str, int]:
        return {str(r["outcome"] or "pending"): int(r["n"])
                for r in await self._fetch("inbox_counts")}

    async def archive_prune(self, *, before: datetime, limit: int) -> int:
        row = await self._fetchrow("prune", before=before, limit=limit)
        return max(int(row["jobs"]), int(row["responses"]))


async def create_store(url: str, *, pool_size: int) -> PostgresStore:
    """A store on a pool of ``pool_size`` connections, no more (see
    :mod:`hipq.store.pg_pool`).

    Raises:
        ValueError: the URL is not one asyncpg can use.
    """
    loggers = pg_pool.QueryLoggers()
    pool = await pg_pool.create_pool(url, pool_size=pool_size, loggers=loggers)
    return PostgresStore(pool, url=url, pool_size=pool_size, loggers=loggers)

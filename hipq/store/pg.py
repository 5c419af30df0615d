"""PostgreSQL fast paths for the hot statements of the reconcile loop and enqueue.

The store's generic statements (SQLAlchemy Core, both dialects) pass batches as
expanding ``IN`` lists: one bind parameter per value, a new statement text per list
length, and on a table without planner statistics a filter over the whole backlog.
Here, on PostgreSQL, a batch travels as one array per column (``unnest``), each
statement text is fixed (asyncpg prepares it once per connection), the join to the
batch goes through the primary key whatever the statistics say, and work that
only moves rows between tables (archiving, recording tries) stays inside the
server: one round trip per step, no rows decoded in Python that it does not need.

The statements reach rows of ``jobs`` through the primary key, one batch row at a
time, whatever the planner statistics say (:func:`_locate`): a join between the
batch and ``jobs`` lets the planner pick a plan from its estimates, and a guard
such as ``owner = $me`` on a table analyzed while no job was running is estimated
at one row, which gave a nested loop over the whole running set per batch row
(half a second per 1,000-job archive). The hot table holds only ``queued`` and
``running`` rows, and a job has an ``owner`` only while running, so ``owner = $me``
(with the attempt) says "running, ours, this try", and ``status <> 'running'``
says "queued".

The store runs these on the asyncpg connection under a SQLAlchemy connection
(:func:`driver`), inside its transaction or, for a single statement, without one.
JSON values travel as text and are cast to ``jsonb`` in SQL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.store import schema as s

# The PostgreSQL array type of each column type, for ``unnest($n::type[])``.
_PG_TYPES: dict[type[Any], str] = {
    sa.Text: "text", sa.Integer: "int4", sa.Float: "float8", sa.Boolean: "bool",
    sa.BigInteger: "int8",
}


def _pg_type(column: sa.Column[Any]) -> str:
    if isinstance(column.type, s.UTCDateTime):
        return "timestamptz"
    if column.type is s.JSON or isinstance(column.type, sa.JSON):
        return "jsonb"
    for kind, name in _PG_TYPES.items():
        if isinstance(column.type, kind):
            return name
    raise TypeError(f"no PostgreSQL array type for column {column.name}")


JOB_COLUMNS = [c.name for c in s.jobs.columns]
_JOB_TYPES = {c.name: _pg_type(c) for c in s.jobs.columns}
JSON_COLUMNS = frozenset(name for name, kind in _JOB_TYPES.items() if kind == "jsonb")


@dataclass(frozen=True, slots=True)
class Compiled:
    """A SQLAlchemy statement compiled once for asyncpg: its text and its parameters
    in order, with the values it was built with (``params`` replaces some)."""

    sql: str
    names: tuple[str, ...]
    values: dict[str, Any]

    def params(self, replace: dict[str, Any]) -> list[Any]:
        return [replace[n] if n in replace else self.values[n] for n in self.names]


def compile_select(stmt: sa.Select[Any], dialect: Any) -> Compiled:
    compiled = stmt.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    names = tuple(compiled.positiontup or ())
    values = compiled.construct_params()
    processors: dict[str, Any] = dict(compiled._bind_processors)  # type adaptations
    return Compiled(sql=compiled.string, names=names,
                    values={n: processors[n](v) if n in processors else v
                            for n, v in values.items()})


def to_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


async def driver(conn: AsyncConnection, *, begin: bool = True) -> Any:
    """The asyncpg connection under ``conn`` (SQLAlchemy's asyncpg adapter has no
    public accessor), with its transaction begun unless ``begin`` is false.

    The adapter begins the transaction lazily, at the first statement it runs;
    statements sent straight to the driver must not run before it (they would
    commit on their own)."""
    fairy = await conn.get_raw_connection()
    adapted: Any = fairy.dbapi_connection
    if begin and adapted._transaction is None:
        await adapted._start_transaction()
    return adapted._connection


def _unnest(columns: Sequence[str], types: dict[str, str], start: int = 1) -> tuple[str, str]:
    """``unnest($1::t1[], ...)`` over text arrays for JSON columns, and the select
    list that casts those back (``c::jsonb``)."""
    args = ", ".join(f"${start + i}::{'text' if types[c] == 'jsonb' else types[c]}[]"
                     for i, c in enumerate(columns))
    select = ", ".join(f"u.{c}::jsonb" if types[c] == "jsonb" else f"u.{c}" for c in columns)
    return f"unnest({args}) AS u({', '.join(columns)})", select


def _insert_jobs_sql(scalars: frozenset[str], *, guarded: bool = True) -> str:
    """The INSERT of new jobs where the columns in ``scalars`` take one value for
    the whole batch (``$n``) and the others one array each (``unnest``).

    New jobs, except ids already taken, live (the conflict) or archived (the NOT
    EXISTS): those are answered from what is stored, which is only read when
    something was not inserted. Without ``guarded`` (no ON CONFLICT clause, a
    fifth cheaper for the database) a live id or key in use fails the statement."""
    select, arrays, names = [], [], []
    for n, column in enumerate(JOB_COLUMNS, start=1):
        kind = _JOB_TYPES[column]
        sent = "text" if kind == "jsonb" else kind
        value = f"${n}::{sent}" if column in scalars else f"u.{column}"
        if column not in scalars:
            arrays.append(f"${n}::{sent}[]")
            names.append(column)
        select.append(f"{value}::jsonb" if kind == "jsonb" else value)
    value_of = dict(zip(JOB_COLUMNS, select, strict=True))
    return (f"INSERT INTO jobs ({', '.join(JOB_COLUMNS)}) SELECT {', '.join(select)} "
            f"FROM unnest({', '.join(arrays)}) AS u({', '.join(names)}) "
            f"WHERE NOT EXISTS (SELECT 1 FROM archived_jobs a "
            f"WHERE a.queue = {value_of['queue']} AND a.id = u.id) "
            f"{'ON CONFLICT DO NOTHING ' if guarded else ''}RETURNING queue, id")


@dataclass(frozen=True, slots=True)
class InsertJobs:
    """:func:`insert_jobs`: the statement (``guarded``: ON CONFLICT DO NOTHING;
    ``plain``: without, failing on a live id or key in use) and its parameters."""

    guarded: str
    plain: str
    params: list[Any]


_ROW_OF_JOB = attrgetter(*JOB_COLUMNS)  # a job's column values, in one call
_INSERT_SQL: dict[frozenset[str], tuple[str, str]] = {}
_INSERT_SQL_CACHE = 256  # statement shapes kept (in practice a handful)


def insert_jobs(jobs: Sequence[Any]) -> InsertJobs:
    """The INSERT of these jobs and its parameters: a column whose value is the
    same for every job (the queue, the status, most of the settings) travels once,
    the others as arrays. The driver checks every array element it encodes, so a
    batch of new jobs costs a few arrays instead of thirty."""
    scalars: set[str] = set()
    params: list[Any] = []
    for name, column in zip(JOB_COLUMNS, zip(*map(_ROW_OF_JOB, jobs), strict=True),
                            strict=True):
        values = list(column)
        if name in JSON_COLUMNS:  # compared as text: in Python, {"a": 1} == {"a": True}
            values = list(map(to_json, values))
        first = values[0]
        if name != "id" and values.count(first) == len(values):
            scalars.add(name)
            params.append(first)
        else:
            params.append(values)
    shape = frozenset(scalars)
    sql = _INSERT_SQL.get(shape)
    if sql is None:
        if len(_INSERT_SQL) >= _INSERT_SQL_CACHE:
            _INSERT_SQL.clear()
        sql = _INSERT_SQL[shape] = (_insert_jobs_sql(shape),
                                    _insert_jobs_sql(shape, guarded=False))
    return InsertJobs(guarded=sql[0], plain=sql[1], params=params)


UNIQUE_VIOLATION = asyncpg.UniqueViolationError


JOBS_BY_KEYS = "SELECT * FROM jobs WHERE correlation_key = ANY($1::text[])"

_INBOX_COLUMNS = ["correlation_key", "attempt", "status", "retryable", "result", "error",
                  "extend_seconds", "source", "dedup_key", "received_at"]
_INBOX_TYPES = {c.name: _pg_type(c) for c in s.response_inbox.columns}
_INBOX_FROM, _INBOX_SELECT = _unnest(_INBOX_COLUMNS, _INBOX_TYPES)
# A repeated dedup_key (in the table or earlier in the batch) is not inserted.
INSERT_INBOX = (f"INSERT INTO response_inbox ({', '.join(_INBOX_COLUMNS)}) "
                f"SELECT {_INBOX_SELECT} FROM {_INBOX_FROM} "
                f"ON CONFLICT DO NOTHING RETURNING id, dedup_key")


def inbox_columns(rows: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """Column arrays of inbox rows (dicts by column name) for :data:`INSERT_INBOX`."""
    return [[to_json(r[c]) for r in rows] if _INBOX_TYPES[c] == "jsonb" else [r[c] for r in rows]
            for c in _INBOX_COLUMNS]


ARCHIVED_BY_IDS = ("SELECT * FROM archived_jobs WHERE queue = $1 AND id = ANY($2::text[])")
LIVE_BY_IDS = ("SELECT * FROM jobs WHERE queue = $1 AND id = ANY($2::text[])")

def _locate(batch: str, guard: str, lock: str = "") -> str:
    """The physical rows (``ctid``) of a batch's jobs, found one by one through the
    primary key: a LATERAL subquery with LIMIT is never flattened into a join, so no
    planner estimate (a table without statistics, or with statistics that say no
    job has an owner) can turn this into a scan of the backlog per batch row. The
    statements then join ``jobs`` on ``ctid`` alone (a TID scan per row), with no
    other condition on ``jobs`` for the planner to misjudge: a row changed since by
    another transaction has a new ``ctid`` and is left alone."""
    return (f"SELECT t.tid, b.* FROM {batch} AS b CROSS JOIN LATERAL ("
            f"SELECT k.ctid AS tid FROM jobs k WHERE k.queue = b.queue AND k.id = b.id "
            f"{guard} LIMIT 1 {lock}) AS t")


def _by_tid(alias: str, located: str) -> str:
    """Join ``jobs`` (as ``alias``) to the rows :func:`_locate` found, through TID
    scans: the join condition alone let the planner hash the whole table (a
    sequential scan of the backlog per statement once a batch is large enough);
    the ``= ANY`` of the same TIDs gives it a TID scan of just those rows."""
    return (f"{alias}.ctid = {located}.tid "
            f"AND {alias}.ctid = ANY(ARRAY(SELECT tid FROM {located}))")


# Step 4: lock the chosen rows that are still queued (skipping rows another
# transaction holds), then mark them running. $1 queue, $2 ids, $3 now, $4 owner,
# $5 heartbeat seconds (or NULL).
CLAIM = f"""
WITH chosen AS ({_locate("(SELECT $1::text AS queue, unnest($2::text[]) AS id)",
                         "AND k.status <> 'running'", "FOR UPDATE OF k SKIP LOCKED")})
UPDATE jobs t SET
    status = 'running', attempt = t.attempt + 1, launched_at = $3::timestamptz,
    deadline = $3::timestamptz + make_interval(secs => CASE WHEN $5::float8 IS NULL
        OR t.timeout_seconds < $5::float8 THEN t.timeout_seconds ELSE $5::float8 END),
    owner = $4::text, launch_confirmed = false, updated_at = $3::timestamptz,
    correlation_key = CASE WHEN t.correlation_fixed THEN t.correlation_key
        ELSE t.token || '.' || (t.attempt + 1)::text END
FROM chosen WHERE {_by_tid('t', 'chosen')}
RETURNING t.id, t.attempt, t.correlation_key, t.deadline
"""

_OURS = "AND k.attempt = b.attempt AND k.owner = $owner"


def _mark_applied(applied: str, first: int, now: str) -> str:
    """A CTE marking the responses of the changes that applied (those in the CTE
    ``applied``, by queue and job id) as applied, in the same statement. Parameters
    ``$first..$first+2``: inbox ids, and the queue and job id each belongs to."""
    ids, queues, jobs = (f"${first + i}" for i in range(3))
    return f"""marked AS (
    UPDATE response_inbox r SET applied_at = {now}, outcome = 'applied'
    FROM unnest({ids}::int8[], {queues}::text[], {jobs}::text[]) AS m(id, queue, job)
    JOIN {applied} a ON a.queue = m.queue AND a.id = m.job
    WHERE r.id = ANY({ids}::int8[]) AND r.id = m.id AND r.applied_at IS NULL)"""

CONFIRM = f"""
WITH hit AS ({_locate("(SELECT * FROM unnest($1::text[], $2::text[], $3::int4[]) "
                      "AS u(queue, id, attempt))", _OURS.replace("$owner", "$4"))})
UPDATE jobs t SET launch_confirmed = true FROM hit WHERE {_by_tid('t', 'hit')}
"""

# Step 3, ending tries: delete the running rows (guarded by attempt and owner),
# archive them with their end, record the try; returns what applied. The ends come
# as one JSON array of arrays (:func:`archive_ends`): one encoding call for the
# batch, where eight parameter arrays cost a driver check per element and a JSON
# encoding per value (a JSON null in result, error or response is SQL NULL, as it
# was). $1 ends, $2 owner, $3 now, $4-$6 responses applied.
_ARCHIVE_COLUMNS = [c for c in JOB_COLUMNS if c not in ("status", "result", "error",
                                                        "updated_at")]
ARCHIVE = f"""
WITH c AS (
    SELECT e->>0 AS queue, e->>1 AS id, (e->>2)::int4 AS attempt,
           COALESCE(e->>3, 'failed') AS status, NULLIF(e->4, 'null') AS result,
           NULLIF(e->5, 'null') AS error, COALESCE(e->>6, 'unknown') AS outcome,
           NULLIF(e->7, 'null') AS response
    FROM jsonb_array_elements($1::jsonb) AS e),
hit AS ({_locate("c", _OURS.replace("$owner", "$2"))}),
ended AS (
    DELETE FROM jobs j USING hit WHERE {_by_tid('j', 'hit')}
    RETURNING j.*, hit.status AS end_status, hit.result AS end_result,
              hit.error AS end_error, hit.outcome AS end_outcome,
              hit.response AS end_response),
archived AS (
    INSERT INTO archived_jobs ({', '.join(_ARCHIVE_COLUMNS)}, status, result, error,
                               updated_at, finished_at)
    SELECT {', '.join(_ARCHIVE_COLUMNS)}, end_status, end_result, end_error,
           $3::timestamptz, $3::timestamptz FROM ended
    ON CONFLICT DO NOTHING),
tries AS (
    INSERT INTO job_attempts (queue, job_id, attempt, correlation_key, launched_at,
                              finished_at, outcome, error, response)
    SELECT queue, id, attempt, correlation_key, launched_at, $3::timestamptz, end_outcome,
           end_error, end_response FROM ended),
{_mark_applied("ended", 4, "$3::timestamptz")}
SELECT queue, id FROM ended
"""
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


_END_OF = attrgetter("queue", "id", "attempt", "status", "result", "error", "outcome",
                     "response")


def archive_ends(changes: Sequence[Any]) -> str:
    """The ``$1`` of :data:`ARCHIVE`: each change's job, try and end, as JSON."""
    return _ENCODE(list(map(_END_OF, changes)))


# Step 3, retries: back to queued with a new run_at (and data, if the strategy
# changed it), the try recorded. $1 queue[], $2 id[], $3 attempt[], $4 run_at[],
# $5 data[] (NULL: unchanged), $6 error[], $7 outcome[], $8 response[], $9 the
# try's correlation key[], $10 owner, $11 now, $12-$14 responses applied.
REQUEUE = f"""
WITH c AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::int4[], $4::timestamptz[], $5::text[],
                         $6::text[], $7::text[], $8::text[], $9::text[])
        AS c(queue, id, attempt, run_at, data, error, outcome, response, key)),
hit AS ({_locate("c", _OURS.replace("$owner", "$10"))}),
back AS (
    UPDATE jobs j SET status = 'queued', run_at = hit.run_at,
        data = COALESCE(hit.data::jsonb, j.data), error = hit.error::jsonb, updated_at = $11,
        owner = NULL, deadline = NULL, launch_confirmed = false,
        correlation_key = CASE WHEN j.correlation_fixed THEN j.correlation_key END
    FROM hit WHERE {_by_tid('j', 'hit')}
    RETURNING j.queue, j.id, j.attempt, j.launched_at, hit.error, hit.outcome, hit.response,
              hit.key),
tries AS (
    INSERT INTO job_attempts (queue, job_id, attempt, correlation_key, launched_at,
                              finished_at, outcome, error, response)
    SELECT queue, id, attempt, key, launched_at, $11, outcome, error::jsonb,
           response::jsonb FROM back),
{_mark_applied("back", 12, "$11::timestamptz")}
SELECT queue, id FROM back
"""

# Heartbeats: push deadlines out. $1 queue[], $2 id[], $3 attempt[], $4 deadline[],
# $5 owner, $6 now, $7-$9 responses applied.
EXTEND = f"""
WITH hit AS ({_locate("(SELECT * FROM unnest($1::text[], $2::text[], $3::int4[], "
                      "$4::timestamptz[]) AS u(queue, id, attempt, deadline))",
                      _OURS.replace("$owner", "$5"))}),
pushed AS (
    UPDATE jobs j SET deadline = hit.deadline, updated_at = $6
    FROM hit WHERE {_by_tid('j', 'hit')}
    RETURNING j.queue, j.id),
{_mark_applied("pushed", 7, "$6::timestamptz")}
SELECT queue, id FROM pushed
"""

# The inbox by id (its primary key) and by pending key (a partial index): ``= ANY``
# restrictions, not joins, so the planner cannot scan the whole inbox per row.
INBOX_MARK = """
UPDATE response_inbox r SET applied_at = $3, outcome = u.outcome
FROM unnest($1::int8[], $2::text[]) AS u(id, outcome)
WHERE r.id = ANY($1::int8[]) AND r.id = u.id AND r.applied_at IS NULL
"""

INBOX_PENDING_FOR_KEYS = """
SELECT * FROM response_inbox
WHERE correlation_key = ANY($1::text[]) AND applied_at IS NULL
ORDER BY id
"""

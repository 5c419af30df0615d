"""Enqueue from SQL, in the producer's own transaction (docs/from-your-database.md).

The outbox pattern: write your row and its job in one transaction, and the job
exists if and only if that transaction commits. There is no second system to keep
in step::

    with engine.begin() as conn:                        # your transaction
        conn.execute(orders.insert().values(id="o-42", total=99))
        hipq.sql.enqueue(conn, "invoice-shipments", "o-42", {"order": "o-42"},
                         priority=5, run_after="2030-01-01T09:00:00+01:00")
    # committed: the order and its job together; an exception: neither

    async with async_engine.begin() as conn:            # the same, async
        await hipq.sql.enqueue(conn, "invoice-shipments", "o-42", {"order": "o-42"})

Connection kinds: SQLAlchemy ``Connection`` and ``Session`` (also a
``scoped_session``), ``AsyncConnection`` and ``AsyncSession`` (also an
``async_scoped_session``), an asyncpg connection (or a pool's connection), and a
psycopg 3 ``Connection`` or ``AsyncConnection``. With a sync kind the functions run
at once and return ``None`` (:func:`enqueue`) or the number of jobs
(:func:`enqueue_many`); with an async kind they return an awaitable:
``await hipq.sql.enqueue(async_conn, ...)``. Either way the input is checked before
anything is sent, so a bad call raises at once and leaves the transaction as it was.
Nothing is committed: the caller commits or rolls back. The database is the one of
hipq: PostgreSQL (every kind) or the SQLite file (the SQLAlchemy kinds).

What is written: rows in ``job_intake`` (the function ``hipq_enqueue()`` writes the
same rows from plain SQL, any language, a trigger). On PostgreSQL one statement per
call, ``SELECT hipq_enqueue_many(queue, jobs)``, inserts every row and sends the
notification ``hipq_wake``/``intake`` (as ``hipq_enqueue()`` does), which PostgreSQL
delivers once, at commit; the function runs as hipq's role (``SECURITY DEFINER``),
so the caller's role needs EXECUTE on it and nothing on the intake table
(docs/from-your-database.md, "Grants"). A job whose ``data`` and fields are over the
limit the daemons stored (``api.max_body_bytes``) is refused at once: by the
function on PostgreSQL (the driver's error, SQLSTATE 54000; the transaction is then
aborted), by a :class:`ValueError` before anything is written on SQLite. The owner of
the queue then ingests the rows with every rule of ``PUT /v1/jobs/{queue}/{id}``
(id pattern, data limits, windows, idempotency: the same id and body again is
nothing new). A row that breaks a rule (an unknown queue, a bad id, a conflict with
a job of the same id and another body) is not dropped: it stays in the intake with
its error, listed by ``GET /v1/intake?status=rejected`` and ``hipq intake
--rejected`` and counted in ``hipq_intake_rejected_total{queue}``. Checked here is
only what storing a row needs; everything else is judged at ingest.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, overload

from hipq.clock import SystemClock

if TYPE_CHECKING:
    from typing import TypeAlias

    import psycopg
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

    SyncConnection: TypeAlias = "Connection | Session | psycopg.Connection[Any]"
    AsyncConnectionLike: TypeAlias = (
        "AsyncConnection | AsyncSession | psycopg.AsyncConnection[Any]")

__all__ = ["ENQUEUE_FIELDS", "JobItem", "enqueue", "enqueue_many"]

JobItem = Mapping[str, Any] | tuple[str, dict[str, Any] | None]
"""A job of :func:`enqueue_many`: ``{"id": ..., "data": ..., "run_after": ...,
<fields>}`` or ``(id, data)``."""

# The enqueue fields of PUT /v1/jobs/{queue}/{id} (hipq.bodies.EnqueueRequest) that
# go to the ``fields`` column; ``data`` and ``run_after`` have columns of their own.
ENQUEUE_FIELDS = frozenset({
    "expires_at", "priority", "weight", "time_windows", "timezone", "timeout_seconds",
    "correlation_key", "ordering_key", "critical", "traceparent", "tracestate",
})
CHANNEL = "hipq_wake"  # hipq.store.notify.CHANNEL
PAYLOAD = "intake"  # hipq.store.notify.INTAKE, as hipq_enqueue() sends it

_COLUMNS = "queue, job_id, data, run_after, fields, enqueued_at"
# PostgreSQL: one statement, the SECURITY DEFINER function hipq_enqueue_many() (its
# checks, the rows in the caller's order and one notification), all rows in one JSON
# document (a text parameter: no driver's jsonb codec in the way).
_POSTGRES = ("SELECT hipq_enqueue_many(CAST({queue} AS text),"
             " CAST(CAST({jobs} AS text) AS jsonb))")
_POSTGRES_SQLALCHEMY = _POSTGRES.format(queue=":queue", jobs=":jobs")
_POSTGRES_ASYNCPG = _POSTGRES.format(queue="$1", jobs="$2")
_POSTGRES_PSYCOPG = _POSTGRES.format(queue="%(queue)s", jobs="%(jobs)s")
# SQLite: one executemany; times as epoch seconds, JSON as text; first the limit the
# daemons stored (hipq.store.records.INTAKE_LIMIT_KEY).
_SQLITE = (f"INSERT INTO job_intake ({_COLUMNS}) VALUES"
           " (:queue, :job_id, :data, :run_after, :fields, :enqueued_at)")
_SQLITE_LIMIT = "SELECT value FROM hipq_meta WHERE key = 'intake_max_bytes'"
DEFAULT_LIMIT = 1_048_576  # hipq.store.records.INTAKE_MAX_BYTES: no daemon stored one

# "\u0000" in JSON text that is not an escaped backslash followed by "u0000"
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_CLOCK = SystemClock()
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _Row:
    job_id: str
    data: str  # JSON text
    run_after: datetime | None  # aware UTC
    fields: str  # JSON text


@overload
def enqueue(conn: SyncConnection, queue: str, id: str,
            data: dict[str, Any] | None = None, *,
            run_after: datetime | str | None = None, **fields: Any) -> None: ...
@overload
def enqueue(conn: AsyncConnectionLike, queue: str, id: str,
            data: dict[str, Any] | None = None, *,
            run_after: datetime | str | None = None, **fields: Any) -> Awaitable[None]: ...
@overload
def enqueue(conn: object, queue: str, id: str,
            data: dict[str, Any] | None = None, *,
            run_after: datetime | str | None = None, **fields: Any) -> Any: ...
def enqueue(conn: object, queue: str, id: str,
            data: dict[str, Any] | None = None, *,
            run_after: datetime | str | None = None, **fields: Any) -> Any:
    """Enqueue job ``id`` of ``queue`` in the transaction of ``conn``.

    ``data`` is the job's JSON object (default ``{}``); ``run_after`` an aware
    datetime or an ISO 8601 string with an offset; ``fields`` any other enqueue
    field (:data:`ENQUEUE_FIELDS`: ``priority``, ``expires_at``, ``ordering_key``...;
    a datetime value must be aware). Returns ``None`` for a sync connection, an
    awaitable of ``None`` for an async one.

    Raises:
        TypeError: ``conn`` is no supported connection, a value has the wrong type,
            or a field name is unknown.
        ValueError: an empty queue or id, data JSON cannot hold (NaN, a NUL
            character...), a time without an offset, a database other than
            PostgreSQL or SQLite.
    """
    return _submit(conn, _text("queue", queue), [_row(id, data, run_after, fields)], None)


@overload
def enqueue_many(conn: SyncConnection, queue: str,
                 jobs: Iterable[JobItem],
                 ) -> int: ...
@overload
def enqueue_many(conn: AsyncConnectionLike, queue: str,
                 jobs: Iterable[JobItem],
                 ) -> Awaitable[int]: ...
@overload
def enqueue_many(conn: object, queue: str,
                 jobs: Iterable[JobItem],
                 ) -> Any: ...
def enqueue_many(conn: object, queue: str,
                 jobs: Iterable[JobItem],
                 ) -> Any:
    """Enqueue several jobs of ``queue`` in the transaction of ``conn``, in order.

    Each job is a mapping ``{"id": ..., "data": ..., "run_after": ..., <fields>}``
    (only ``id`` required; values as for :func:`enqueue`) or an ``(id, data)``
    tuple. Returns the number of jobs written (for an async connection, an awaitable
    of it). One bad job raises (its index in the message) and writes none.

    Raises:
        TypeError, ValueError: as :func:`enqueue`, for any job.
    """
    queue = _text("queue", queue)
    rows = [_job_row(index, job) for index, job in enumerate(jobs)]
    return _submit(conn, queue, rows, len(rows))


def _job_row(index: int, job: JobItem) -> _Row:
    try:
        if isinstance(job, tuple):
            if len(job) != 2:
                raise TypeError(f"a job tuple is (id, data), not {len(job)} items")
            return _row(job[0], job[1], None, {})
        if not isinstance(job, Mapping):
            raise TypeError(f"a job is a mapping or an (id, data) tuple, not {type(job)!r}")
        if "id" not in job:
            raise ValueError("a job needs an 'id'")
        fields = {k: v for k, v in job.items() if k not in ("id", "data", "run_after")}
        return _row(job["id"], job.get("data"), job.get("run_after"), fields)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"jobs[{index}]: {exc}") from None


# --- checks at the door: what storing a row needs -------------------------------------

def _row(job_id: object, data: object, run_after: object, fields: Mapping[str, Any]) -> _Row:
    unknown = sorted(set(fields) - ENQUEUE_FIELDS)
    if unknown:
        raise TypeError(f"unknown enqueue field(s) {unknown}; known: {sorted(ENQUEUE_FIELDS)}")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise TypeError(f"data must be a dict (a JSON object), not {type(data).__name__}")
    return _Row(job_id=_text("id", job_id), data=_json("data", data, _DATA_JSON),
                run_after=_instant("run_after", run_after),
                fields=_json("fields", dict(fields), _FIELDS_JSON) if fields else "{}")


def _text(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    if "\x00" in value:
        raise ValueError(f"{what} holds a NUL character, which the database cannot store")
    _utf8(what, value)
    return value


def _json(what: str, value: dict[str, Any], encoder: json.JSONEncoder) -> str:
    try:
        text = encoder.encode(value)
    except TypeError as exc:
        raise TypeError(f"{what} is not JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{what} is not JSON: {exc}") from None
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise ValueError(f"{what} holds a NUL character, which the database cannot store")
    _utf8(what, text)
    return text


def _utf8(what: str, text: str) -> None:
    if text.isascii():
        return
    try:
        text.encode()
    except UnicodeEncodeError:
        raise ValueError(f"{what} holds a lone surrogate (no UTF-8 for it)") from None


def _instant(what: str, value: object) -> datetime | None:
    """An aware datetime or ISO 8601 string with an offset, as aware UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{what} is not an ISO 8601 time: {value!r}") from None
    if not isinstance(value, datetime):
        raise TypeError(f"{what} must be a datetime or an ISO 8601 str, "
                        f"not {type(value).__name__}")
    return _utc(what, value)


def _utc(what: str, value: datetime) -> datetime:
    if value.utcoffset() is None:
        raise ValueError(f"{what} has no time zone offset: {value.isoformat()!r}")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{what} is out of range once converted to UTC") from None


def _field_value(value: object) -> str:
    """JSON for what ``json`` does not know in ``fields``: aware datetimes."""
    if isinstance(value, datetime):
        return _utc("a datetime", value).isoformat()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# made once: json.dumps() with arguments makes an encoder per call
_DATA_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_FIELDS_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                                default=_field_value)


# --- connection kinds ----------------------------------------------------------------

_Submit = Callable[[str, list[_Row]], Any]  # writes (sync kinds) or returns an awaitable

# (module, class, kind, async): a class is looked up only if its module is loaded
# already (an object of it could not exist otherwise), so no library is imported.
_KINDS = (
    ("sqlalchemy.engine", "Connection", "sqlalchemy", False),
    ("sqlalchemy.orm", "Session", "sqlalchemy", False),
    ("sqlalchemy.orm", "scoped_session", "sqlalchemy_scoped", False),
    ("sqlalchemy.ext.asyncio", "AsyncConnection", "sqlalchemy", True),
    ("sqlalchemy.ext.asyncio", "AsyncSession", "sqlalchemy", True),
    ("sqlalchemy.ext.asyncio", "async_scoped_session", "sqlalchemy_scoped", True),
    ("asyncpg", "Connection", "asyncpg", True),
    ("asyncpg.pool", "PoolConnectionProxy", "asyncpg", True),
    ("psycopg", "Connection", "psycopg", False),
    ("psycopg", "AsyncConnection", "psycopg", True),
)


def _kind(conn: object) -> tuple[str, bool]:
    for module, name, kind, is_async in _KINDS:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and isinstance(conn, cls):
            return kind, is_async
    raise TypeError(
        f"hipq.sql takes a SQLAlchemy Connection, Session, AsyncConnection or "
        f"AsyncSession, an asyncpg connection or a psycopg 3 connection, "
        f"not {type(conn).__module__}.{type(conn).__qualname__}")


def _submitter(conn: Any) -> tuple[_Submit, bool]:
    """How rows reach the database through ``conn``, and whether that is async."""
    kind, is_async = _kind(conn)
    if kind == "sqlalchemy_scoped":  # a registry: the session of this thread or task
        conn, kind = conn(), "sqlalchemy"
    if kind == "sqlalchemy":
        return _sqlalchemy(conn, is_async), is_async
    if kind == "asyncpg":
        return (lambda queue, rows: conn.execute(_POSTGRES_ASYNCPG, queue, _document(rows)),
                is_async)
    return (lambda queue, rows: conn.execute(
        _POSTGRES_PSYCOPG, {"queue": queue, "jobs": _document(rows)}), is_async)


def _sqlalchemy(conn: Any, is_async: bool) -> _Submit:
    bind = conn.get_bind() if hasattr(conn, "get_bind") else conn  # a session's engine
    dialect = bind.dialect.name
    if dialect == "postgresql":
        statement = _sqlalchemy_text(_POSTGRES_SQLALCHEMY)
        return lambda queue, rows: conn.execute(
            statement, {"queue": queue, "jobs": _document(rows)})
    if dialect == "sqlite":
        return _sqlite(conn, is_async)
    raise ValueError(f"hipq.sql works on PostgreSQL and SQLite, not {dialect}")


def _sqlite(conn: Any, is_async: bool) -> _Submit:
    """SQLite: the stored limit read, every row checked against it, then the rows."""
    statement, limit = _sqlalchemy_text(_SQLITE), _sqlalchemy_text(_SQLITE_LIMIT)
    if is_async:
        async def write(queue: str, rows: list[_Row]) -> None:
            _fit(rows, (await conn.execute(limit)).scalar())
            await conn.execute(statement, _sqlite_rows(queue, rows))
        return write

    def write_now(queue: str, rows: list[_Row]) -> None:
        _fit(rows, conn.execute(limit).scalar())
        conn.execute(statement, _sqlite_rows(queue, rows))
    return write_now


def _fit(rows: list[_Row], stored: object) -> None:
    """Raise ValueError for the first row over the stored limit (bytes of its data
    and fields as JSON text, as the database measures them)."""
    try:
        limit = int(str(stored)) if stored is not None else DEFAULT_LIMIT
    except ValueError:
        limit = DEFAULT_LIMIT
    for index, row in enumerate(rows):
        size = len(row.data.encode()) + len(row.fields.encode())
        if size > limit:
            raise ValueError(f"jobs[{index}] (id {row.job_id[:200]!r}): its data and fields "
                             f"are {size} bytes of JSON text, over the intake's limit of "
                             f"{limit} bytes (api.max_body_bytes)")


@functools.cache
def _sqlalchemy_text(sql: str) -> Any:
    from sqlalchemy import text

    return text(sql)


def _document(rows: list[_Row]) -> str:
    """The rows as one JSON array (data and fields are JSON text already)."""
    return "[" + ",".join(
        f'{{"id":{json.dumps(r.job_id, ensure_ascii=False)},"data":{r.data},'
        f'"run_after":{"null" if r.run_after is None else json.dumps(r.run_after.isoformat())},'
        f'"fields":{r.fields}}}' for r in rows) + "]"


def _sqlite_rows(queue: str, rows: list[_Row]) -> list[dict[str, Any]]:
    now = _CLOCK.now().timestamp()
    return [{"queue": queue, "job_id": r.job_id, "data": r.data, "fields": r.fields,
             "run_after": None if r.run_after is None else r.run_after.timestamp(),
             "enqueued_at": now} for r in rows]


def _submit(conn: object, queue: str, rows: list[_Row], result: _T) -> _T | Awaitable[_T]:
    """Write ``rows`` (none: no statement) and give ``result``, or for an async
    connection an awaitable that writes them and gives ``result``."""
    submit, is_async = _submitter(conn)
    if not is_async:
        if rows:
            submit(queue, rows)
        return result
    return _awaited(submit(queue, rows) if rows else None, result)


async def _awaited(pending: Awaitable[object] | None, result: _T) -> _T:
    if pending is not None:
        await pending
    return result

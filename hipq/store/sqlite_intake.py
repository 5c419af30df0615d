"""The SQLite driver's statements of the intake (docs/from-your-database.md), as
SQLAlchemy Core over ``job_intake``. A base of
:class:`~hipq.store.sqlite.SQLiteStore` (``_tx``: one writer, BEGIN IMMEDIATE).

Every read is bounded in bytes before a value is read (docs/from-your-database.md,
"Limits"): ``size``, the bytes of a row's data and fields as stored text, is
computed by SQLite as the row is written (a generated column). A pending read
takes the rows' ids and sizes first (each queue in its index order), keeps those
within the byte budget, then reads the values of those rows alone, a row over the
limit without them. SQLite stores what any writer gives (a typed column takes any
value): a time that is not a number hipq reads, JSON text that is not one value
(``json_valid``), an id that is not text, make the row unreadable, and it is
rejected on its own; a listing shows such a value as none, never fails on it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.store import schema as s
from hipq.store.records import (
    EARLIEST,
    FUTURE_REJECTION,
    INTAKE_ID_CHARS,
    INTAKE_LIMIT_KEY,
    INTAKE_MAX_BYTES,
    INTAKE_OTHER,
    INTAKE_OTHER_NAMES,
    INTAKE_QUEUE_CHARS,
    INTAKE_READ_BYTES,
    INTAKE_VALUE_CHARS,
    LATEST,
    IntakeRow,
    too_big,
    unreadable,
)
from hipq.store.sqlite_seen import SQLiteSeen

_t = s.job_intake
_PENDING = _t.c.error.is_(None)
_FIRST, _LAST = EARLIEST.timestamp(), LATEST.timestamp()


def _bare(column: Any) -> Any:
    """A column as SQLite holds it (no conversion either way)."""
    return sa.type_coerce(column, sa.types.NullType())


def _raw(column: Any, name: str | None = None) -> Any:
    """A selected column as SQLite holds it, named."""
    return _bare(column).label(name or column.name)


def _kept(column: Any, fits: Any) -> Any:
    """A JSON column's stored text where ``fits``, else NULL (never read)."""
    return _raw(sa.case((fits, column), else_=sa.null()), column.name)


def _values(max_bytes: Any) -> list[Any]:
    """A pending row's columns, its values left out over ``max_bytes``; the JSON
    text kept only when it is one JSON value."""
    fits = _t.c.size <= max_bytes
    return [_t.c.id, _raw(_t.c.queue), _raw(sa.func.substr(_t.c.job_id, 1, INTAKE_ID_CHARS),
                                             "job_id"), _t.c.size,
            _kept(_t.c.data, fits & (sa.func.json_valid(_t.c.data) == 1)),
            _kept(_t.c.fields, fits & (sa.func.json_valid(_t.c.fields) == 1)),
            _raw(_t.c.run_after), _raw(_t.c.enqueued_at), _raw(_t.c.error),
            _raw(_t.c.rejected_at)]


def _instant(raw: Any) -> tuple[datetime | None, bool]:
    """A stored time as an aware datetime, and whether it was readable (a finite
    number of epoch seconds within what hipq reads; None is readable: no time)."""
    if raw is None:
        return None, True
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        return None, False
    if not _FIRST <= raw < _LAST:
        return None, False
    return datetime.fromtimestamp(raw, UTC), True


def _text(raw: Any) -> str | None:
    """A stored string as text (a BLOB shown by its length)."""
    if raw is None or isinstance(raw, str):
        return raw
    if isinstance(raw, bytes):
        return f"<{len(raw)} bytes>"
    return str(raw)


def _row(row: Any, max_bytes: int) -> IntakeRow:
    """A pending row, with why it cannot be read (the first reason) if it cannot."""
    run_after, run_after_ok = _instant(row["run_after"])
    enqueued_at, enqueued_at_ok = _instant(row["enqueued_at"])
    size = int(row["size"] or 0)
    problem = None
    if size > max_bytes:
        problem = too_big(size, max_bytes)
    elif not (row["job_id"] is None or isinstance(row["job_id"], str)):
        problem = unreadable("id")
    elif row["data"] is None:
        problem = unreadable("data")
    elif row["fields"] is None:
        problem = unreadable("fields")
    elif not run_after_ok:
        problem = unreadable("run_after")
    elif not enqueued_at_ok:
        problem = unreadable("enqueued_at")
    return IntakeRow(id=row["id"], queue=_text(row["queue"]) or "",
                     job_id=_text(row["job_id"]), data=_json(row["data"]), run_after=run_after,
                     fields=_json(row["fields"]), enqueued_at=enqueued_at,
                     error=_text(row["error"]), rejected_at=_instant(row["rejected_at"])[0],
                     size=size, problem=problem)


def _json(raw: Any) -> Any:
    """A JSON column's stored value as text (a number is its own text)."""
    return raw if raw is None or isinstance(raw, str) else str(raw)


def _within(sizes: list[tuple[int, int]], *, limit: int, max_bytes: int,
            budget: int) -> list[int]:
    """The ids of the first ``limit`` rows (``(id, size)`` in id order) that start
    under ``budget`` bytes; a row over ``max_bytes`` counts for nothing (not read)."""
    kept: list[int] = []
    total = 0
    for row_id, size in sizes[:limit]:
        if total >= budget:
            break
        kept.append(row_id)
        total += size if size <= max_bytes else 0
    return kept


class SQLiteIntake(SQLiteSeen):
    """The intake's statements, on top of the driver's reads (and its partner views)."""

    async def intake_pending(self, *, queues: Sequence[str], limit: int, after: int = 0,
                             max_bytes: int = INTAKE_MAX_BYTES,
                             budget: int = INTAKE_READ_BYTES) -> list[IntakeRow]:
        async with self._tx() as conn:
            sizes: list[tuple[int, int]] = []
            for queue in queues:  # each in its index order (a list would read all and sort)
                sizes += [(r[0], int(r[1] or 0)) for r in await conn.execute(
                    sa.select(_t.c.id, _t.c.size).where(_PENDING, _t.c.queue == queue,
                                                        _t.c.id > after)
                    .order_by(_t.c.id).limit(limit))]
            kept = _within(sorted(sizes), limit=limit, max_bytes=max_bytes, budget=budget)
            if not kept:
                return []
            rows = await conn.execute(sa.select(*_values(max_bytes))
                                      .where(_t.c.id.in_(kept), _PENDING).order_by(_t.c.id))
            return [_row(r._mapping, max_bytes) for r in rows]

    async def intake_orphans(self, *, known: Sequence[str], before: datetime,
                             limit: int) -> list[IntakeRow]:
        async with self._tx() as conn:
            rows = await conn.execute(
                sa.select(_t.c.id,
                          _raw(sa.func.substr(_t.c.queue, 1, INTAKE_QUEUE_CHARS), "queue"),
                          _raw(sa.func.substr(_t.c.job_id, 1, INTAKE_ID_CHARS), "job_id"))
                .where(_PENDING, _t.c.queue.not_in(list(known)), _t.c.enqueued_at < before)
                .order_by(_t.c.id).limit(limit))
            return [IntakeRow(id=r.id, queue=_text(r.queue) or "", job_id=_text(r.job_id),
                              data=None, run_after=None, fields=None, enqueued_at=None)
                    for r in rows]

    async def intake_done(self, *, ingested: Sequence[int], rejected: Mapping[int, str],
                          now: datetime) -> None:
        if not ingested and not rejected:
            return
        async with self._tx() as conn:
            for start in range(0, len(ingested), 500):
                await conn.execute(_t.delete().where(
                    _t.c.id.in_(list(ingested[start:start + 500])), _PENDING))
            if rejected:
                await conn.execute(
                    _t.update().where(_t.c.id == sa.bindparam("b_id"), _PENDING)
                    .values(error=sa.bindparam("b_error"), rejected_at=now),
                    [{"b_id": i, "b_error": e} for i, e in rejected.items()])

    async def intake_find(self, queue: str, job_id: str) -> IntakeRow | None:
        async with self._tx() as conn:
            max_bytes = await _limit(conn)
            found = (await conn.execute(
                sa.select(*_values(max_bytes)).where(_PENDING, _t.c.queue == queue,
                                                     _t.c.job_id == job_id)
                .order_by(_t.c.id).limit(1))).first()
        return None if found is None else _row(found._mapping, max_bytes)

    async def intake_rejected_page(self, *, limit: int, queue: str | None = None,
                                   after: tuple[datetime, int] | None = None,
                                   value_chars: int = INTAKE_VALUE_CHARS) -> list[IntakeRow]:
        at = _t.c.rejected_at
        stmt = sa.select(*_listed(value_chars)).where(
            _t.c.error.is_not(None), sa.func.typeof(at).in_(("integer", "real")),
            _bare(at) >= _FIRST, _bare(at) < _LAST)
        if queue is not None:
            stmt = stmt.where(_t.c.queue == queue)
        if after is not None:
            stmt = stmt.where(sa.tuple_(at, _t.c.id) < sa.tuple_(
                sa.literal(after[0], s.UTCDateTime()), sa.literal(after[1])))
        async with self._tx() as conn:
            rows = await conn.execute(stmt.order_by(at.desc(), _t.c.id.desc()).limit(limit))
            return [_listed_row(r._mapping) for r in rows]

    async def intake_prune(self, *, before: datetime, now: datetime, limit: int) -> int:
        at = _bare(_t.c.rejected_at)
        doomed = (sa.select(_t.c.id).where(
            _t.c.error.is_not(None),
            sa.or_(at.is_(None), sa.func.typeof(at).not_in(("integer", "real")),
                   at < before.timestamp(), at > (now + FUTURE_REJECTION).timestamp()))
            .order_by(at, _t.c.id).limit(limit))
        async with self._tx() as conn:
            return int((await conn.execute(_t.delete().where(_t.c.id.in_(doomed)))).rowcount)

    async def intake_limit_set(self, max_bytes: int) -> None:
        stmt = insert(s.meta).values(key=INTAKE_LIMIT_KEY, value=str(max_bytes))
        async with self._tx() as conn:
            await conn.execute(stmt.on_conflict_do_update(index_elements=["key"],
                                                          set_={"value": str(max_bytes)}))

    async def intake_counts(self) -> dict[str, tuple[int, int]]:
        """As PostgreSQL's ``intake_counts``: bounded whatever names producers wrote."""
        name = sa.func.substr(sa.cast(_t.c.queue, sa.Text), 1, 100)
        per = sa.select(name.label("queue"),
                        sa.func.sum(sa.case((_PENDING, 1), else_=0)).label("pending"),
                        sa.func.sum(sa.case((_PENDING, 0), else_=1)).label("rejected"),
                        ).group_by(name).subquery()
        known = sa.exists().where(s.queues.c.id == per.c.queue)
        numbered = sa.select(per, known.label("known"), sa.func.row_number().over(
            partition_by=known, order_by=per.c.queue).label("n")).subquery()
        shown = numbered.c.known | (numbered.c.n <= INTAKE_OTHER_NAMES)
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(numbered.c.queue, numbered.c.pending,
                                                numbered.c.rejected).where(shown))
            counts = {r[0]: (int(r[1]), int(r[2])) for r in rows}
            rest = (await conn.execute(sa.select(sa.func.count(), sa.func.sum(numbered.c.pending),
                                                 sa.func.sum(numbered.c.rejected))
                                       .where(~shown))).one()
        if rest[0]:
            counts[INTAKE_OTHER] = (int(rest[1]), int(rest[2]))
        return counts

    async def intake_last_id(self) -> int:
        async with self._tx() as conn:
            return int((await conn.execute(sa.select(sa.func.max(_t.c.id)))).scalar() or 0)


async def _limit(conn: AsyncConnection) -> int:
    """The intake's limit the daemons stored (api.max_body_bytes), else the default."""
    stored = (await conn.execute(sa.select(s.meta.c.value)
                                 .where(s.meta.c.key == INTAKE_LIMIT_KEY))).scalar()
    try:
        return int(stored) if stored is not None else INTAKE_MAX_BYTES
    except ValueError:
        return INTAKE_MAX_BYTES


# -- the listing of rejected rows --------------------------------------------------------

_STRINGS = (("queue", _t.c.queue), ("id", _t.c.job_id), ("error", _t.c.error))


def _shown(column: Any, chars: int, whole: Any = None) -> Any:
    """A stored string or JSON text cut to ``chars`` (whole when ``whole`` says it
    fits without being measured); a BLOB as its hex digits, cut."""
    cut = sa.func.substr(column, 1, chars)
    text = cut if whole is None else sa.case((whole, column), else_=cut)
    return sa.case((sa.func.typeof(column) == "blob",
                    sa.func.hex(sa.func.substr(column, 1, chars // 2))), else_=text)


def _listed(chars: int) -> list[Any]:
    whole = _t.c.size <= chars
    columns = [_t.c.id, _t.c.size, _raw(_t.c.run_after), _raw(_t.c.enqueued_at),
               _raw(_t.c.rejected_at)]
    for name, column in _STRINGS:
        columns += [_raw(_shown(column, chars), column.name),
                    (sa.func.length(column) > chars).label(f"{name}_cut")]
    for column in (_t.c.data, _t.c.fields):
        columns += [_raw(_shown(column, chars, whole), column.name),
                    sa.and_(~whole, sa.func.length(column) > chars).label(f"{column.name}_cut")]
    return columns


def _listed_row(row: Any) -> IntakeRow:
    return IntakeRow(id=row["id"], queue=_text(row["queue"]) or "", job_id=_text(row["job_id"]),
                     data=_json(row["data"]), run_after=_instant(row["run_after"])[0],
                     fields=_json(row["fields"]), enqueued_at=_instant(row["enqueued_at"])[0],
                     error=_text(row["error"]), rejected_at=_instant(row["rejected_at"])[0],
                     size=int(row["size"] or 0),
                     cut=tuple(n for n in ("queue", "id", "data", "fields", "error")
                               if row[f"{n}_cut"]))

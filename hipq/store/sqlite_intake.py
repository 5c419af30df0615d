"""The SQLite driver's statements of the intake (SPEC 16: enqueue from SQL), as
SQLAlchemy Core over ``job_intake``. A base of
:class:`~hipq.store.sqlite.SQLiteStore` (``_tx``: one writer, BEGIN IMMEDIATE)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from hipq.store import schema as s
from hipq.store.records import IntakeRow, intake_of
from hipq.store.sqlite_reads import SQLiteReads

_t = s.job_intake
_PENDING = _t.c.error.is_(None)
# the columns, JSON as its text (ingestion validates the text in one go)
_RAW = [sa.type_coerce(c, sa.Text).label(c.name) if c.name in ("data", "fields") else c
        for c in _t.columns]


class SQLiteIntake(SQLiteReads):
    """The intake's statements, on top of the driver's reads."""

    async def _rows(self, stmt: Any) -> list[IntakeRow]:
        async with self._tx() as conn:
            return [intake_of(r._mapping) for r in await conn.execute(stmt)]

    async def intake_pending(self, *, queues: Sequence[str], limit: int,
                             after: int = 0) -> list[IntakeRow]:
        rows: list[IntakeRow] = []
        for queue in queues:  # each in its index order (a list would read all and sort)
            rows += await self._rows(sa.select(*_RAW).where(
                _PENDING, _t.c.queue == queue, _t.c.id > after)
                .order_by(_t.c.id).limit(limit))
        return sorted(rows, key=lambda r: r.id)[:limit]

    async def intake_orphans(self, *, known: Sequence[str], before: datetime,
                             limit: int) -> list[IntakeRow]:
        return await self._rows(sa.select(*_RAW).where(
            _PENDING, _t.c.queue.not_in(list(known)), _t.c.enqueued_at < before)
            .order_by(_t.c.id).limit(limit))

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
        rows = await self._rows(sa.select(*_RAW).where(
            _PENDING, _t.c.queue == queue, _t.c.job_id == job_id).order_by(_t.c.id).limit(1))
        return rows[0] if rows else None

    async def intake_rejected_page(self, *, limit: int, queue: str | None = None,
                                   after: tuple[datetime, int] | None = None
                                   ) -> list[IntakeRow]:
        stmt = sa.select(*_RAW).where(_t.c.error.is_not(None))
        if queue is not None:
            stmt = stmt.where(_t.c.queue == queue)
        if after is not None:
            stmt = stmt.where(sa.tuple_(_t.c.rejected_at, _t.c.id) < sa.tuple_(
                sa.literal(after[0], s.UTCDateTime()), sa.literal(after[1])))
        return await self._rows(stmt.order_by(_t.c.rejected_at.desc(), _t.c.id.desc())
                                .limit(limit))

    async def intake_counts(self) -> dict[str, tuple[int, int]]:
        pending = sa.func.sum(sa.case((_PENDING, 1), else_=0))
        rejected = sa.func.sum(sa.case((_t.c.error.is_not(None), 1), else_=0))
        async with self._tx() as conn:
            rows = await conn.execute(sa.select(_t.c.queue, pending, rejected)
                                      .group_by(_t.c.queue))
            return {r[0]: (int(r[1]), int(r[2])) for r in rows}

    async def intake_last_id(self) -> int:
        async with self._tx() as conn:
            return int((await conn.execute(sa.select(sa.func.max(_t.c.id)))).scalar() or 0)

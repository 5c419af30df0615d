"""The SQLite driver's partner views (docs/http-api.md, "Partners"), as SQLAlchemy
Core over ``partner_state`` and ``partner_minutes``. A base of
:class:`~hipq.store.sqlite.SQLiteStore`, under its intake
(:class:`~hipq.store.sqlite_intake.SQLiteIntake`; ``_tx``: one writer, BEGIN IMMEDIATE)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import insert

from hipq.store import schema as s
from hipq.store.seen import PartnerMinute, PartnerSeen, minute_row_of, seen_of
from hipq.store.sqlite_reads import SQLiteReads


class SQLiteSeen(SQLiteReads):
    async def partner_seen_save(self, *, seen: Sequence[PartnerSeen],
                                minutes: Sequence[PartnerMinute], before: datetime) -> None:
        if not seen and not minutes:
            return
        st, mt = s.partner_state, s.partner_minutes
        async with self._tx() as conn:
            if seen:
                stmt = insert(st)
                stmt = stmt.on_conflict_do_update(index_elements=[st.c.partner], set_={
                    c: stmt.excluded[c] for c in ("snapshot", "updated_at", "owner")})
                await conn.execute(stmt, [
                    {"partner": x.partner, "snapshot": dict(x.snapshot),
                     "updated_at": x.updated_at, "owner": x.owner} for x in seen])
            if minutes:
                add = insert(mt)
                add = add.on_conflict_do_update(
                    index_elements=[mt.c.partner, mt.c.minute], set_={
                        "accepted": mt.c.accepted + add.excluded.accepted,
                        "refused": mt.c.refused + add.excluded.refused,
                        "in_flight_max": sa.func.max(mt.c.in_flight_max,
                                                     add.excluded.in_flight_max),
                        "learned_rate": add.excluded.learned_rate,
                        "buckets": add.excluded.buckets})
                await conn.execute(add, [
                    {"partner": m.partner, "minute": m.minute, "accepted": m.accepted,
                     "refused": m.refused, "in_flight_max": m.in_flight_max,
                     "learned_rate": m.learned_rate, "buckets": [dict(b) for b in m.buckets]}
                    for m in minutes])
                await conn.execute(mt.delete().where(
                    mt.c.partner.in_(sorted({m.partner for m in minutes})),
                    mt.c.minute < before))

    async def partner_seen_list(self, *, partners: Sequence[str] | None = None
                                ) -> dict[str, PartnerSeen]:
        t = s.partner_state
        stmt = sa.select(t).order_by(t.c.partner)
        if partners is not None:
            stmt = stmt.where(t.c.partner.in_(list(partners)))
        async with self._tx() as conn:
            return {r.partner: seen_of(r._mapping) for r in await conn.execute(stmt)}

    async def partner_minutes_list(self, *, partner: str, since: datetime
                                   ) -> list[PartnerMinute]:
        t = s.partner_minutes
        stmt = sa.select(t).where(t.c.partner == partner, t.c.minute >= since) \
            .order_by(t.c.minute)
        async with self._tx() as conn:
            return [minute_row_of(r._mapping) for r in await conn.execute(stmt)]

"""The PostgreSQL driver's statements of the partner views (docs/http-api.md,
"Partners"): each partner's last snapshot and its last hour per minute, as its
owner wrote them. A mixin of :class:`~hipq.store.postgres.PostgresStore`, whose
named-statement helpers it uses (the blocks are in ``postgres.sql``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from hipq.store.pgsql import to_json
from hipq.store.seen import PartnerMinute, PartnerSeen, minute_row_of, seen_of


class SeenStatements:
    async def _fetch(self, name: str, **values: Any) -> list[Any]:
        raise NotImplementedError

    async def _execute(self, name: str, **values: Any) -> int:
        raise NotImplementedError

    async def partner_seen_save(self, *, seen: Sequence[PartnerSeen],
                                minutes: Sequence[PartnerMinute], before: datetime) -> None:
        if not seen and not minutes:
            return
        await self._execute(
            "partner_seen_save", partners=[x.partner for x in seen],
            snapshots=[to_json(dict(x.snapshot)) for x in seen],
            updated_ats=[x.updated_at for x in seen], owners=[x.owner for x in seen],
            minute_partners=[m.partner for m in minutes], minutes=[m.minute for m in minutes],
            accepted=[m.accepted for m in minutes], refused=[m.refused for m in minutes],
            in_flight_maxes=[m.in_flight_max for m in minutes],
            learned_rates=[m.learned_rate for m in minutes],
            buckets=[to_json([dict(b) for b in m.buckets]) for m in minutes], before=before)

    async def partner_seen_list(self, *, partners: Sequence[str] | None = None
                                ) -> dict[str, PartnerSeen]:
        rows = (await self._fetch("partner_seen_all") if partners is None
                else await self._fetch("partner_seen_list", partners=list(partners)))
        return {r["partner"]: seen_of(r) for r in rows}

    async def partner_minutes_list(self, *, partner: str, since: datetime
                                   ) -> list[PartnerMinute]:
        return [minute_row_of(r) for r in
                await self._fetch("partner_minutes_list", partner=partner, since=since)]

"""The memory store's partner views (docs/http-api.md, "Partners"): each partner's
last snapshot, and its minutes by (partner, minute). A base of
:class:`~hipq.store.memory.MemoryStore`; see :mod:`hipq.store.memory_tables`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from hipq.store.memory_tables import MemoryBase, copied
from hipq.store.seen import PartnerMinute, PartnerSeen, added


def _seen_copy(seen: PartnerSeen) -> PartnerSeen:
    return replace(seen, snapshot=copied(dict(seen.snapshot)))


def _minute_copy(minute: PartnerMinute) -> PartnerMinute:
    return replace(minute, buckets=copied([dict(b) for b in minute.buckets]))


class MemorySeen(MemoryBase):
    async def partner_seen_save(self, *, seen: Sequence[PartnerSeen],
                                minutes: Sequence[PartnerMinute], before: datetime) -> None:
        t = self._t
        for one in seen:
            t.partner_state[one.partner] = _seen_copy(one)
        for minute in minutes:
            key = (minute.partner, minute.minute)
            t.partner_minutes[key] = _minute_copy(added(t.partner_minutes.get(key), minute))
        partners = {m.partner for m in minutes}
        for key in [k for k in t.partner_minutes if k[0] in partners and k[1] < before]:
            del t.partner_minutes[key]

    async def partner_seen_list(self, *, partners: Sequence[str] | None = None
                                ) -> dict[str, PartnerSeen]:
        stored = self._t.partner_state
        wanted = sorted(stored) if partners is None else [p for p in partners if p in stored]
        return {p: _seen_copy(stored[p]) for p in wanted}

    async def partner_minutes_list(self, *, partner: str, since: datetime
                                   ) -> list[PartnerMinute]:
        return [_minute_copy(m) for key, m in sorted(self._t.partner_minutes.items())
                if key[0] == partner and key[1] >= since]

"""What the owner of a partner's queues sees of the partner, as the store keeps it
(docs/http-api.md, "Partners"; docs/dashboard.md): its last snapshot
(``partner_state``) and its last hour per minute (``partner_minutes``). Plain
records and the row readers the three drivers share; no I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

KEPT = timedelta(hours=1)  # the minutes kept: the owner deletes older rows as it writes


@dataclass(frozen=True, slots=True, kw_only=True)
class PartnerSeen:
    """A partner as its owner last saw it: ``snapshot`` (JSON: buckets, in flight,
    learned rate, the busiest keys; :mod:`hipq.engine.seen`), when and by whom it was
    written."""

    partner: str
    snapshot: Mapping[str, Any]
    updated_at: datetime
    owner: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PartnerMinute:
    """One minute of a partner (``minute``: its start, UTC): launches admitted and
    tries refused in it, the largest weight in flight seen, and the learned rate and
    each bucket's use (JSON) as last seen in it."""

    partner: str
    minute: datetime
    accepted: int = 0
    refused: int = 0
    in_flight_max: int = 0
    learned_rate: float | None = None
    buckets: Sequence[Mapping[str, Any]] = field(default_factory=list)


def minute_of(when: datetime) -> datetime:
    """The start of ``when``'s minute."""
    return when.replace(second=0, microsecond=0)


def added(stored: PartnerMinute | None, more: PartnerMinute) -> PartnerMinute:
    """``more`` added to the stored row of its minute, as every driver adds it:
    counts summed, ``in_flight_max`` the larger, the learned rate and the buckets
    the newer."""
    if stored is None:
        return more
    return PartnerMinute(partner=more.partner, minute=more.minute,
                         accepted=stored.accepted + more.accepted,
                         refused=stored.refused + more.refused,
                         in_flight_max=max(stored.in_flight_max, more.in_flight_max),
                         learned_rate=more.learned_rate, buckets=more.buckets)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def seen_of(r: Any) -> PartnerSeen:
    """A PartnerSeen from a row of ``partner_state`` (``snapshot`` as text or parsed)."""
    return PartnerSeen(partner=r["partner"], snapshot=_json(r["snapshot"]),
                       updated_at=r["updated_at"], owner=r["owner"])


def minute_row_of(r: Any) -> PartnerMinute:
    """A PartnerMinute from a row of ``partner_minutes``."""
    rate = r["learned_rate"]
    return PartnerMinute(partner=r["partner"], minute=r["minute"], accepted=int(r["accepted"]),
                         refused=int(r["refused"]), in_flight_max=int(r["in_flight_max"]),
                         learned_rate=None if rate is None else float(rate),
                         buckets=_json(r["buckets"]))

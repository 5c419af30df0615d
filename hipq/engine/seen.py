"""What the owner of a partner's queues sees of the partner, written for every daemon
(docs/http-api.md, "Partners"; docs/dashboard.md).

At the tick's end (:meth:`~hipq.engine.plan.TickPlan.finish`), at most once a
second, the owner writes for each declared partner it holds queues of: its snapshot
(:meth:`~hipq.engine.budgets.Budgets.snapshot`, with the whole partner's buckets, in
flight, learned rate and totals), replacing the stored one; and what the second
added to the current minute (launches admitted and tries refused since its last
write, the weight in flight, the learned rate and the buckets' use), its older
minutes pruned past an hour (:mod:`hipq.store.seen`). One store call for all.

A tick between writes costs one comparison of times; a write is O(the partners held
and their accounts). Nothing here is read back: the API and the metrics read the
store, so every daemon serves the same and a restart keeps the last hour.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from hipq.engine.budgets import Budgets
from hipq.engine.requests import Plan, call
from hipq.engine.runtimes import Runtimes
from hipq.spec import PartnerSpec
from hipq.store.seen import KEPT, PartnerMinute, PartnerSeen, minute_of

SAVE_EVERY = timedelta(seconds=1)  # a partner's snapshot is written at most this often


def jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it: a time as ISO text (UTC, ``Z``), a number that
    is not finite as None."""
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def bucket_name(bucket: Mapping[str, Any]) -> str:
    """A bucket's name in the metrics: ``requests_per_60s``, ``cost_per_0.5s``."""
    return f"{bucket['unit']}_per_{float(bucket['per_seconds']):g}s"


def configured_buckets(partner: PartnerSpec) -> list[dict[str, Any]]:
    """The partner's buckets as configured, nothing used: what a partner nobody owns
    yet shows."""
    return [{"unit": limit.unit, "limit": limit.amount, "per_seconds": limit.per_seconds,
             "used": 0.0, "room_at": None, "source": "configured"} for limit in partner.limits]


def whole_buckets(partner: PartnerSpec, snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The whole partner's buckets in a snapshot: its own account's; with ``by`` (each
    key has buckets of its own), each bucket as the fullest of the keys shown; the
    configured ones, nothing used, when no launch went through it yet."""
    whole = snapshot.get("whole")
    if partner.by is None:
        if whole and whole.get("buckets"):
            return [dict(b) for b in whole["buckets"]]
        return configured_buckets(partner)
    fullest = configured_buckets(partner)
    for key in snapshot.get("keys") or ():
        for i, bucket in enumerate(key.get("buckets") or ()):
            if i < len(fullest) and bucket.get("used", 0) > fullest[i]["used"]:
                fullest[i] = dict(bucket)
    return fullest


class Seen:
    def __init__(self, budgets: Budgets, owner: str) -> None:
        self.budgets = budgets
        self.owner = owner
        self._saved_at: datetime | None = None
        self._written: dict[str, tuple[int, int]] = {}  # partner -> tally at the last write

    def save(self, now: datetime, held: Collection[str], runtimes: Runtimes) -> Plan[None]:
        """Write what the owner sees of the partners of the ``held`` queues, at most
        once a second (a plan: :mod:`hipq.engine.requests`)."""
        budgets = self.budgets
        if not budgets.partners:
            return
        if self._saved_at is not None and self._saved_at <= now < self._saved_at + SAVE_EVERY:
            return
        self._saved_at = now
        partners: set[str] = set()
        for queue in held:
            runtime = runtimes.cached(queue)
            name = None if runtime is None else runtime.spec.partner
            if name is not None and name in budgets.partners:
                partners.add(name)
        if not partners:
            return
        seen, minutes = self.seen(sorted(partners), now)
        yield call("partner_seen_save", seen=seen, minutes=minutes,
                   before=minute_of(now) - KEPT)

    def seen(self, partners: Sequence[str], now: datetime
             ) -> tuple[list[PartnerSeen], list[PartnerMinute]]:
        """The snapshots of ``partners`` at ``now`` and what they add to its minute."""
        budgets, minute = self.budgets, minute_of(now)
        seen: list[PartnerSeen] = []
        minutes: list[PartnerMinute] = []
        for partner_id in partners:
            spec = budgets.partners[partner_id]
            snapshot = jsonable(budgets.snapshot(partner_id, now))
            learned = budgets.learned(partner_id, now)
            admitted, refused = budgets.tally(partner_id)
            before = self._written.get(partner_id, (0, 0))
            self._written[partner_id] = (admitted, refused)
            in_flight = budgets.in_flight(partner_id)
            buckets = whole_buckets(spec, snapshot)
            snapshot.update(in_flight=in_flight, accepted_total=admitted,
                            refused_total=refused, buckets=buckets,
                            learned_rate=None if learned is None else round(learned, 3))
            seen.append(PartnerSeen(partner=partner_id, snapshot=snapshot, updated_at=now,
                                    owner=self.owner))
            minutes.append(PartnerMinute(
                partner=partner_id, minute=minute, accepted=max(admitted - before[0], 0),
                refused=max(refused - before[1], 0), in_flight_max=in_flight,
                learned_rate=snapshot["learned_rate"],
                buckets=[{k: b[k] for k in ("unit", "limit", "per_seconds", "used")}
                         for b in buckets]))
        return seen, minutes

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
import re
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


_NAME_CHARS = re.compile(r"[^a-z0-9_]+")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def bucket_name(bucket: Mapping[str, Any]) -> str:
    """A bucket's name in the metrics: ``requests_per_60s``, ``cost_per_0.5s``; a bucket
    the partner reported without its window, ``reported_`` and its name as the partner
    gave it, made of ``a-z0-9_`` and cut to 40 characters (labels stay bounded)."""
    seconds = _number(bucket.get("per_seconds"))
    if seconds is not None:
        return f"{bucket.get('unit')}_per_{seconds:g}s"
    name = _NAME_CHARS.sub("_", str(bucket.get("name") or bucket.get("unit")).lower())
    return f"reported_{name}"[:40]


def normal_bucket(bucket: Mapping[str, Any]) -> dict[str, Any]:
    """One bucket of :meth:`~hipq.engine.budgets.Budgets.snapshot` as the store keeps
    it: its name, unit, limit, window, use and room (a limit or window the partner did
    not report: None; what a reported bucket used: its limit less what it has left;
    nothing used once it has reset) and source."""
    limit, used = _number(bucket.get("limit")), _number(bucket.get("used"))
    remaining = _number(bucket.get("remaining"))
    if bucket.get("source") == "partner":
        if remaining is None:  # reset since the report: whole again
            remaining = limit
        used = None if limit is None or remaining is None else max(limit - remaining, 0.0)
    elif remaining is None and limit is not None:
        remaining = max(limit - (used or 0.0), 0.0)
    return {"name": bucket_name(bucket), "unit": bucket.get("unit"), "limit": limit,
            "per_seconds": _number(bucket.get("per_seconds")), "used": used,
            "remaining": remaining, "room_at": bucket.get("room_at"),
            "source": bucket.get("source", "configured")}


def configured_buckets(partner: PartnerSpec) -> list[dict[str, Any]]:
    """The partner's buckets as configured, nothing used: what a partner nobody owns
    yet shows."""
    return [normal_bucket({"unit": limit.unit, "limit": limit.amount,
                           "per_seconds": limit.per_seconds, "used": 0.0, "room_at": None,
                           "source": "configured"}) for limit in partner.limits]


def whole_buckets(partner: PartnerSpec, snapshot: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The whole partner's buckets in a snapshot (:func:`normal_bucket`): its own
    account's, the configured ones and those the partner reported; with ``by`` (each
    key has buckets of its own), each bucket by name as the one with the least room
    among the keys shown; the configured ones, nothing used, before any launch."""
    whole = snapshot.get("whole")
    if partner.by is None:
        if whole and whole.get("buckets"):
            return [normal_bucket(b) for b in whole["buckets"]]
        return configured_buckets(partner)
    tightest = {b["name"]: b for b in configured_buckets(partner)}
    for key in snapshot.get("keys") or ():
        for bucket in map(normal_bucket, key.get("buckets") or ()):
            held = tightest.get(bucket["name"])
            if held is None or (bucket["remaining"] is not None and (
                    held["remaining"] is None or bucket["remaining"] < held["remaining"])):
                tightest[bucket["name"]] = bucket
    return list(tightest.values())


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
            for key in snapshot.get("keys") or ():
                key["buckets"] = [normal_bucket(b) for b in key.get("buckets") or ()]
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
                buckets=[{k: b[k] for k in ("name", "unit", "limit", "per_seconds", "used",
                                            "remaining")} for b in buckets]))
        return seen, minutes

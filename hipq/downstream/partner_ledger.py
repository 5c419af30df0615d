"""The test partner's books (:mod:`hipq.downstream.partner`): per API key, the
launches in progress and the buckets (:mod:`hipq.downstream.partner_buckets`), who
is admitted and why not, and the counts ``GET /_partner/stats`` shows.

A launch is admitted when every bucket of its key has room for it (one request
from each requests bucket, its estimated cost from each cost bucket), then when
its key has fewer than ``concurrency`` in progress; admitting takes from every
bucket at once, a refusal takes nothing. Its end settles the actual cost in the
cost buckets (:meth:`Ledger.settle`) and frees its place (:meth:`Ledger.release`).
Each step is one call with no ``await`` inside, so admission is exact however
many launches arrive at once.

Pure: no I/O library; every time is given, in monotonic seconds.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hipq.downstream.partner_buckets import Bucket, BucketView, Charge, Limit, Shape, bucket


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: Literal["concurrency", "rate", "cost"]  # rate: a requests bucket lacked room
    buckets: tuple[str, ...]  # the buckets that lacked room (none for concurrency)
    auto_retry_after: int  # whole seconds until they have room: the ``auto`` value


@dataclass(slots=True)
class Admission:
    """One accepted launch, until its end."""

    key: str
    estimate: float
    charges: list[Charge]
    released: bool = False


@dataclass(slots=True)
class BucketCount:
    accepted: int = 0
    refused: int = 0  # refusals for lack of room in this bucket
    cost: float = 0.0  # the actual cost of the accepted launches that ended
    max_used: float = 0.0  # the most it ever held, as the bucket counts

    def json(self, limit: Limit) -> dict[str, Any]:
        return {"unit": limit.unit, "limit": limit.amount, "per_seconds": limit.per_seconds,
                "accepted": self.accepted, "refused": self.refused, "cost": self.cost,
                "max_used": self.max_used}


@dataclass(slots=True)
class KeyCount:
    accepted: int = 0
    refused: int = 0
    cost: float = 0.0
    buckets: dict[str, BucketCount] = field(default_factory=dict)


@dataclass(slots=True)
class Stats:
    accepted: int = 0
    refused: int = 0
    max_in_flight: int = 0
    max_in_flight_by_key: dict[str, int] = field(default_factory=dict)
    requests: list[tuple[float, str, int | str]] = field(default_factory=list)
    keys: dict[str, KeyCount] = field(default_factory=dict)


class KeyAccount:
    __slots__ = ("buckets", "in_flight")

    def __init__(self, buckets: list[Bucket]) -> None:
        self.buckets = buckets
        self.in_flight = 0


class Ledger:
    """Every key's buckets and launches in progress, and the stats."""

    def __init__(self, limits: Sequence[Limit] = (), shape: Shape = "fixed",
                 concurrency: int | None = None) -> None:
        self.limits = tuple(limits)
        self.concurrency = concurrency
        self.keys: dict[str, KeyAccount] = collections.defaultdict(
            lambda: KeyAccount([bucket(limit, shape) for limit in self.limits]))
        self.stats = Stats()
        self.in_flight = 0

    @staticmethod
    def _amount(b: Bucket, estimate: float) -> float:
        return 1.0 if b.limit.unit == "requests" else estimate

    def admit(self, key: str, estimate: float, now: float) -> Admission | Refusal:
        """Take a launch of ``key`` in (counted) or say why not (nothing taken)."""
        account = self.keys[key]
        lacking = [b for b in account.buckets if not b.fits(self._amount(b, estimate), now)]
        if lacking:
            return self._refuse(key, lacking, estimate, now)
        if self.concurrency is not None and account.in_flight >= self.concurrency:
            return self._refuse(key, [], estimate, now)
        charges = [b.take(self._amount(b, estimate), now) for b in account.buckets]
        account.in_flight += 1
        self.in_flight += 1
        stats = self.stats
        stats.accepted += 1
        stats.max_in_flight = max(stats.max_in_flight, self.in_flight)
        stats.max_in_flight_by_key[key] = max(stats.max_in_flight_by_key.get(key, 0),
                                              account.in_flight)
        self._count(key).accepted += 1
        for b in account.buckets:
            self._bucket_count(key, b, now).accepted += 1
        self._note_used(key, now)
        return Admission(key, estimate, charges)

    def _refuse(self, key: str, lacking: list[Bucket], estimate: float,
                now: float) -> Refusal:
        self.stats.refused += 1
        self._count(key).refused += 1
        for b in lacking:
            self._bucket_count(key, b, now).refused += 1
        if not lacking:
            return Refusal("concurrency", (), 1)
        wait = max(b.room_in(self._amount(b, estimate), now) for b in lacking)
        reason: Literal["rate", "cost"] = (
            "rate" if any(b.limit.unit == "requests" for b in lacking) else "cost")
        return Refusal(reason, tuple(b.limit.name for b in lacking),
                       max(math.ceil(wait - 1e-9), 1))

    def settle(self, admission: Admission, actual: float, now: float) -> None:
        """The launch ended having cost ``actual``: that replaces its estimate."""
        account = self.keys[admission.key]
        for b, charge in zip(account.buckets, admission.charges, strict=True):
            count = self._bucket_count(admission.key, b, now)  # before the change
            if b.limit.unit == "cost":
                b.settle(charge, actual, now)
            count.cost += actual
        self._count(admission.key).cost += actual
        self._note_used(admission.key, now)

    def release(self, admission: Admission) -> None:
        """The launch is no longer in progress (once, however often called)."""
        if not admission.released:
            admission.released = True
            self.keys[admission.key].in_flight -= 1
            self.in_flight -= 1

    def views(self, key: str, now: float) -> list[BucketView]:
        return [b.view(now) for b in self.keys[key].buckets]

    def reset_stats(self) -> None:
        """Clear the counts and the log (the buckets and launches in progress stay)."""
        self.stats = Stats()

    def _count(self, key: str) -> KeyCount:
        return self.stats.keys.setdefault(key, KeyCount())

    def _bucket_count(self, key: str, b: Bucket, now: float) -> BucketCount:
        counts = self._count(key).buckets
        if b.limit.name not in counts:  # since the last reset: what it holds now
            counts[b.limit.name] = BucketCount(max_used=b.used(now))
        return counts[b.limit.name]

    def _note_used(self, key: str, now: float) -> None:
        for b in self.keys[key].buckets:
            count = self._bucket_count(key, b, now)
            count.max_used = max(count.max_used, b.used(now))

    def stats_json(self) -> dict[str, Any]:
        stats = self.stats
        out: dict[str, Any] = {
            "accepted": stats.accepted, "refused": stats.refused,
            "max_in_flight": stats.max_in_flight,
            "max_in_flight_by_key": stats.max_in_flight_by_key,
            "in_flight": self.in_flight, "requests": stats.requests}
        limits = {limit.name: limit for limit in self.limits}
        if stats.keys:  # left out until a key launches: a cleared stats stays as it was
            out["keys"] = {key: {
                "accepted": count.accepted, "refused": count.refused, "cost": count.cost,
                "buckets": {name: bc.json(limits[name]) for name, bc in count.buckets.items()}}
                for key, count in stats.keys.items()}
        return out

"""The buckets a launch takes from (docs/throttling.md, "Partners").

A partner's ``limits`` are buckets of requests or cost per window; every launch of
any of its queues takes one request and its cost from each bucket, or waits.

**The window's shape is a sliding log.** A bucket of ``amount`` per ``per_seconds``
keeps what each launch took and when; a launch fits when what the log holds for
the last ``per_seconds``, plus its own amount, is within ``amount``. This is the
strictest reading of "N per window": whatever the partner counts (fixed windows on
its own clock, a sliding window, a token bucket of that size), a log that never
holds more than N in any window of that length never exceeds it. It costs one
entry per launch still inside its window (500 a minute is 500 entries).

**Cost is reserved, then settled.** A launch takes its estimated cost; when the
try ends, :meth:`Window.settle` puts the actual cost in its place (a try that used
less gives the rest back; one that used more takes it), as long as the launch is
still inside the window (after that, the window it counted in has passed).

**The partner's own count wins when lower** (:class:`Reported`): a bucket the
partner reported (``remaining`` with a reset) allows at most that many more until
the reset (a token bucket, ``refills``, gains room linearly up to its limit until
then); hipq's own launches since the report are taken from it.

A launch larger than a whole bucket would never fit: it goes when the bucket is
empty, alone, so nothing waits forever.

Pure: no I/O library; every time is given.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from hipq.partners.headers import ReportedBucket, Unit

EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class Limit:
    """One configured bucket: ``amount`` requests (or cost) per ``per_seconds``."""

    unit: Unit
    amount: float
    per_seconds: float

    @property
    def name(self) -> str:
        return f"{self.amount:g} {self.unit} per {self.per_seconds:g} s"


class Taken:
    """What one launch took from one window (kept to settle its cost)."""

    __slots__ = ("amount", "at", "live")

    def __init__(self, at: datetime, amount: float) -> None:
        self.at = at
        self.amount = amount
        self.live = True


class Window:
    """One bucket as a sliding log of what launches took."""

    def __init__(self, limit: Limit) -> None:
        if limit.amount <= 0 or limit.per_seconds <= 0:
            raise ValueError("a limit's amount and window must be positive")
        self.limit = limit
        self._span = timedelta(seconds=limit.per_seconds)
        self._log: deque[Taken] = deque()
        self._used = 0.0

    def _expire(self, now: datetime) -> None:
        log = self._log
        while log and log[0].at + self._span <= now:
            gone = log.popleft()
            gone.live = False
            self._used -= gone.amount
        if not log:
            self._used = 0.0  # no drift from float sums

    def used(self, now: datetime) -> float:
        self._expire(now)
        return max(self._used, 0.0)

    def room_at(self, amount: float, now: datetime) -> datetime:
        """The earliest time, from ``now`` on, at which ``amount`` fits."""
        self._expire(now)
        need = self._used + amount - self.limit.amount
        if need <= EPSILON or not self._log:
            return now
        freed = 0.0
        for taken in self._log:
            freed += taken.amount
            if freed >= need - EPSILON:
                return taken.at + self._span
        return self._log[-1].at + self._span  # the log empty then: it fits alone

    def take(self, amount: float, now: datetime) -> Taken:
        """Record a launch at ``now`` (never before the last one recorded)."""
        self._expire(now)
        if self._log and now < self._log[-1].at:
            now = self._log[-1].at
        taken = Taken(now, amount)
        self._log.append(taken)
        self._used += amount
        return taken

    def export(self, now: datetime, bins: int = 64) -> list[tuple[float, float]]:
        """What the window holds, for the next owner: (seconds before ``now``, amount),
        at most ``bins`` entries. Entries are merged into bins of ``per_seconds / bins``
        and each bin takes its latest time, so a restored window leaves the partner's
        count no later than the original (never an over-run by the next owner)."""
        self._expire(now)
        width = self.limit.per_seconds / bins
        merged: dict[int, list[float]] = {}
        for taken in self._log:
            ago = max((now - taken.at).total_seconds(), 0.0)
            slot = merged.setdefault(int(ago // width), [ago, 0.0])
            slot[0] = min(slot[0], ago)  # the latest time: the smallest age
            slot[1] += taken.amount
        return [(round(ago, 3), round(amount, 6)) for ago, amount in
                sorted(merged.values(), reverse=True)]

    def restore(self, entries: list[tuple[float, float]], now: datetime) -> None:
        """An earlier owner's :meth:`export` (ages relative to ``now``), in place of
        what the window holds."""
        self._log.clear()
        self._used = 0.0
        for ago, amount in sorted(entries, reverse=True):
            if ago < self.limit.per_seconds and amount > 0:
                self.take(amount, now - timedelta(seconds=ago))

    def settle(self, taken: Taken, actual: float) -> None:
        """Put the actual cost in place of what ``taken`` reserved."""
        if taken.live:
            self._used += actual - taken.amount
        taken.amount = actual


class Reported:
    """A bucket as the partner last reported it: at most ``remaining`` more until
    ``reset_at`` (linearly more with ``refills``, up to ``limit``)."""

    __slots__ = ("bucket", "since", "taken")

    def __init__(self, bucket: ReportedBucket, now: datetime) -> None:
        self.bucket = bucket
        self.since = now
        self.taken = 0.0  # hipq's own launches since the report

    def expired(self, now: datetime) -> bool:
        return now >= self.bucket.reset_at

    def room(self, now: datetime) -> float:
        b = self.bucket
        if self.expired(now):
            return float("inf")
        left = b.remaining
        if b.refills and b.limit is not None and b.reset_at > self.since:
            share = (now - self.since) / (b.reset_at - self.since)
            left += (b.limit - b.remaining) * share
        return left - self.taken

    def room_at(self, amount: float, now: datetime) -> datetime:
        if self.room(now) >= amount - EPSILON:
            return now
        b = self.bucket
        if b.refills and b.limit is not None and b.limit > b.remaining:
            span = (b.reset_at - self.since).total_seconds()
            per_second = (b.limit - b.remaining) / span
            short = amount - self.room(now)
            return min(now + timedelta(seconds=short / per_second), b.reset_at)
        return b.reset_at

    def take(self, amount: float) -> None:
        self.taken += amount


def more_exact(old: Reported | None, new: ReportedBucket, now: datetime) -> bool:
    """Whether a new report replaces the one held: always once the old one expired,
    else only when it leaves less room (the partner's lower count wins)."""
    if old is None or old.expired(now):
        return True
    return new.remaining < old.room(now)

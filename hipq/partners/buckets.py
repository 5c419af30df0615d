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
from typing import Any

from hipq.partners.headers import ReportedBucket, Unit

EPSILON = 1e-9
EXPORT_BINS = 64  # a window is written for the next owner as this many merged bins


@dataclass(frozen=True, slots=True)
class Limit:
    """One configured bucket: ``amount`` requests (or cost) per ``per_seconds``."""

    unit: Unit
    amount: float
    per_seconds: float

    @property
    def name(self) -> str:
        return f"{self.amount:g} {self.unit} per {self.per_seconds:g} s"


class _Entry:
    """What the launches of one instant took from one window (a tick's launches
    share one entry: the log grows by the tick, not by the launch)."""

    __slots__ = ("amount", "at", "live")

    def __init__(self, at: datetime, amount: float) -> None:
        self.at = at
        self.amount = amount
        self.live = True


class Taken:
    """What one launch took from one window (kept to settle its cost)."""

    __slots__ = ("amount", "entry")

    def __init__(self, entry: _Entry, amount: float) -> None:
        self.entry = entry
        self.amount = amount

    @property
    def at(self) -> datetime:
        return self.entry.at

    @property
    def live(self) -> bool:
        return self.entry.live


class Window:
    """One bucket as a sliding log of what launches took."""

    def __init__(self, limit: Limit) -> None:
        if limit.amount <= 0 or limit.per_seconds <= 0:
            raise ValueError("a limit's amount and window must be positive")
        self.limit = limit
        self._span = timedelta(seconds=limit.per_seconds)
        self._log: deque[_Entry] = deque()
        self._used = 0.0
        # the log merged into EXPORT_BINS bins by absolute time, kept as it changes:
        # slot -> [latest time, amount, entries] (what :meth:`export` writes)
        self._width = limit.per_seconds / EXPORT_BINS
        self._bins: dict[int, list[Any]] = {}

    def _slot(self, at: datetime) -> int:
        return int(at.timestamp() // self._width)

    def _expire(self, now: datetime) -> None:
        log = self._log
        while log and log[0].at + self._span <= now:
            gone = log.popleft()
            gone.live = False
            self._used -= gone.amount
            slot = self._slot(gone.at)
            merged = self._bins[slot]
            merged[1] -= gone.amount
            merged[2] -= 1
            if merged[2] == 0:
                del self._bins[slot]
        if not log:
            self._used = 0.0  # no drift from float sums
            self._bins.clear()

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
        """Record a launch at ``now`` (never before the last one recorded), kept to
        settle its cost."""
        return Taken(self.add(amount, now), amount)

    def add(self, amount: float, now: datetime) -> _Entry:
        """Record a launch at ``now`` (never before the last one recorded): the entry
        it joined."""
        self._expire(now)
        log = self._log
        if log:
            last = log[-1]
            if now <= last.at:  # the same instant (or a clock step back): one entry
                last.amount += amount
                self._used += amount
                self._bins[self._slot(last.at)][1] += amount
                return last
        entry = _Entry(now, amount)
        log.append(entry)
        self._used += amount
        merged = self._bins.get(slot := self._slot(now))
        if merged is None:
            self._bins[slot] = [now, amount, 1]
        else:
            merged[0], merged[1], merged[2] = now, merged[1] + amount, merged[2] + 1
        return entry

    def export(self, now: datetime) -> list[tuple[float, float]]:
        """What the window holds, for the next owner: (seconds before ``now``, amount),
        at most ``EXPORT_BINS + 1`` entries. Entries are merged into bins of
        ``per_seconds / EXPORT_BINS`` (kept as launches come and go, so this is cheap)
        and each bin takes its latest time, so a restored window frees no sooner than
        the original (never an over-run by the next owner)."""
        self._expire(now)
        return [(round(max((now - at).total_seconds(), 0.0), 3), round(amount, 6))
                for at, amount, _ in sorted(self._bins.values(), key=lambda b: b[0])]

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
        entry, change = taken.entry, actual - taken.amount
        if entry.live:
            self._used += change
            self._bins[self._slot(entry.at)][1] += change
            entry.amount += change
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

"""The test partner's buckets (:mod:`hipq.downstream.partner`): one per ``--limit``
and API key, in requests or in cost, of one of two shapes.

* **fixed** (the default): a window opens at the first launch after the previous
  window ended and lasts ``per_seconds``; what the launches in it took adds up, and
  a launch fits while that sum plus its own amount is within ``amount``. ``used``
  is the sum in the open window (0 with none open); the reset is the window's end
  (now with none open). At most ``amount`` per window, as the partner counts it;
  two windows back to back may hold up to twice that in ``per_seconds``.
* **token-bucket**: ``amount`` tokens, full at first, refilled continuously at
  ``amount / per_seconds`` a second up to full (as OpenAI and Anthropic describe
  their limits); a launch fits while the bucket holds its amount. ``used`` is what
  the bucket lacks to be full; the reset is when it is full again.

A launch's cost is taken at admission as its estimate and settled at its end:
:meth:`Bucket.settle` puts the actual cost in its place (in a fixed window, only
while the window it was taken in is still open). An actual cost above the
estimate may leave a bucket overdrawn (``used`` above ``amount``), as a provider
bills what was used; nothing more fits until it is back within ``amount``.

A launch larger than a whole bucket would never fit: it is taken when the bucket
is untouched (no window open, or the token bucket full), alone, as hipq's own
buckets do (hipq/partners/buckets.py), so a job is never refused forever.

Pure: no I/O library; every time is given, in monotonic seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Unit = Literal["requests", "cost"]
Shape = Literal["fixed", "token-bucket"]
SHAPES: tuple[Shape, ...] = ("fixed", "token-bucket")
EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class Limit:
    """One bucket per key: ``amount`` requests (or cost) per ``per_seconds``."""

    unit: Unit
    amount: float
    per_seconds: float

    @property
    def name(self) -> str:
        """``requests-60s``, ``cost-1s``: the bucket's name in headers and stats."""
        return f"{self.unit}-{self.per_seconds:g}s"

    @classmethod
    def parse(cls, text: str) -> Limit:
        """``requests:50/1``, ``cost:90000/60``; ValueError says what is wrong."""
        unit, colon, rest = text.partition(":")
        amount_text, slash, seconds_text = rest.partition("/")
        if not colon or not slash or unit not in ("requests", "cost"):
            raise ValueError("UNIT:AMOUNT/SECONDS, UNIT requests or cost (requests:50/1)")
        amount, per_seconds = _positive(amount_text), _positive(seconds_text)
        if unit == "requests" and amount != int(amount):
            raise ValueError("a number of requests is whole")
        return cls("requests" if unit == "requests" else "cost", amount, per_seconds)


def _positive(text: str) -> float:
    value = float(text)  # ValueError for what is not a number
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r} is not a positive number")
    return value


@dataclass(frozen=True, slots=True)
class BucketView:
    """A bucket at one moment, as the headers describe it."""

    name: str
    unit: Unit
    limit: float
    per_seconds: float
    remaining: float  # never below zero
    reset_in: float  # seconds until the window starts again, or the bucket is full
    refills: bool  # a token bucket


@dataclass(slots=True)
class Charge:
    """What one launch took from one bucket (kept to settle its cost)."""

    amount: float
    window: int = 0  # the fixed window it was taken in


class Bucket:
    """What both shapes answer; see the module docstring."""

    def __init__(self, limit: Limit) -> None:
        self.limit = limit

    def used(self, now: float) -> float:
        raise NotImplementedError

    def reset_in(self, now: float) -> float:
        raise NotImplementedError

    def take(self, amount: float, now: float) -> Charge:
        raise NotImplementedError

    def settle(self, charge: Charge, actual: float, now: float) -> None:
        raise NotImplementedError

    def room_in(self, amount: float, now: float) -> float:
        """Seconds from ``now`` until ``amount`` fits (0: it fits now)."""
        raise NotImplementedError

    def fits(self, amount: float, now: float) -> bool:
        used = self.used(now)
        return used + amount <= self.limit.amount + EPSILON or (
            amount > self.limit.amount and used <= EPSILON)

    def view(self, now: float) -> BucketView:
        limit = self.limit
        return BucketView(limit.name, limit.unit, limit.amount, limit.per_seconds,
                          max(limit.amount - self.used(now), 0.0), self.reset_in(now),
                          isinstance(self, TokenBucket))


class FixedWindow(Bucket):
    def __init__(self, limit: Limit) -> None:
        super().__init__(limit)
        self._start: float | None = None  # None: no window open yet
        self._window = 0  # counts the windows opened
        self._used = 0.0

    def _open(self, now: float) -> bool:
        return self._start is not None and now < self._start + self.limit.per_seconds

    def used(self, now: float) -> float:
        return self._used if self._open(now) else 0.0

    def reset_in(self, now: float) -> float:
        if self._start is None or not self._open(now):
            return 0.0
        return self._start + self.limit.per_seconds - now

    def take(self, amount: float, now: float) -> Charge:
        if not self._open(now):
            self._start, self._used = now, 0.0
            self._window += 1
        self._used += amount
        return Charge(amount, self._window)

    def settle(self, charge: Charge, actual: float, now: float) -> None:
        if self._open(now) and charge.window == self._window:
            self._used = max(self._used + actual - charge.amount, 0.0)
        charge.amount = actual

    def room_in(self, amount: float, now: float) -> float:
        return 0.0 if self.fits(amount, now) else self.reset_in(now)


class TokenBucket(Bucket):
    def __init__(self, limit: Limit) -> None:
        super().__init__(limit)
        self._rate = limit.amount / limit.per_seconds  # refilled per second
        self._used = 0.0  # what the bucket lacks to be full
        self._at: float | None = None

    def _refill(self, now: float) -> None:
        if self._at is not None and now > self._at:
            self._used = max(self._used - self._rate * (now - self._at), 0.0)
        if self._at is None or now > self._at:
            self._at = now

    def used(self, now: float) -> float:
        self._refill(now)
        return self._used

    def reset_in(self, now: float) -> float:
        return self.used(now) / self._rate

    def take(self, amount: float, now: float) -> Charge:
        self._refill(now)
        self._used += amount
        return Charge(amount)

    def settle(self, charge: Charge, actual: float, now: float) -> None:
        self._refill(now)
        self._used = max(self._used + actual - charge.amount, 0.0)
        charge.amount = actual

    def room_in(self, amount: float, now: float) -> float:
        if self.fits(amount, now):
            return 0.0
        short = self._used if amount > self.limit.amount else (
            self._used + amount - self.limit.amount)
        return short / self._rate


def bucket(limit: Limit, shape: Shape) -> Bucket:
    return FixedWindow(limit) if shape == "fixed" else TokenBucket(limit)

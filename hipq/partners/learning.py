"""What hipq learns of a partner that refuses without saying why (docs/throttling.md,
"Partners": the defaults).

A 429 or 503 with no time and no budget headers tells only "too much". hipq then
lowers the partner's launch rate multiplicatively and probes back up along a cubic
curve: CUBIC (Ha, Rhee and Xu, 2008; RFC 9438), as the AWS SDKs' adaptive retry
mode applies it to a client's send rate. After a refusal at rate ``w_max``, the
rate drops to ``beta * w_max`` and then follows

    rate(t) = c * (t - k) ** 3 + w_max,   k = cbrt(w_max * (1 - beta) / c)

(``t``: seconds since the refusal): it climbs fast at first, levels off near the
rate that was refused (where it stays longest: the partner's capacity), then probes
above it, faster the longer no refusal comes. ``c`` scales with ``w_max`` here (the
curve takes the same ``k`` seconds whatever the rate: about 5 s to come back to a
refused rate), where the AWS SDKs use a constant tuned for a few requests a second.

A refusal lowers the rate once per round: refusals of tries launched before the
last decrease say again what was already heard (a burst of 429s is one event, as
TCP decreases once per round trip).

The rate is measured, not assumed: a queue that launched 30 a second when a refusal
came learns 30 * beta, not a fraction of some configured ceiling. With no refusal
yet, nothing is learned (``rate`` is None: no limit of hipq's own). Once the curve
climbs past ``forget_above`` times ``w_max`` with no refusal, the partner is taken
to have stopped refusing and the learned rate is dropped (back to the configured
limits).

Pure: no I/O library; times are given.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

BETA = 0.7  # the rate kept after a refusal (CUBIC's and the AWS SDKs' value)
K_SECONDS = 5.0  # seconds for the curve to climb back to a refused rate
FORGET_ABOVE = 4.0  # the curve past 4 x the refused rate: the partner stopped refusing
MIN_RATE = 0.1  # launches a second, the floor of what is learned (one in ten seconds)
MEASURE_SECONDS = 2.0  # the launch rate is measured over this many seconds


@dataclass(slots=True)
class LaunchRate:
    """The launch rate measured over the last :data:`MEASURE_SECONDS`: one entry per
    group of launches (a tick's), not per launch."""

    stamps: deque[tuple[datetime, int]] = field(default_factory=deque)
    total: int = 0

    def launched(self, now: datetime, count: int = 1) -> None:
        if count > 0:
            self.stamps.append((now, count))
            self.total += count
        self._trim(now)

    def _trim(self, now: datetime) -> None:
        stamps = self.stamps
        while stamps and (now - stamps[0][0]).total_seconds() > MEASURE_SECONDS:
            self.total -= stamps.popleft()[1]

    def per_second(self, now: datetime) -> float:
        self._trim(now)
        if not self.stamps:
            return 0.0
        span = max((now - self.stamps[0][0]).total_seconds(), MEASURE_SECONDS / 4)
        return self.total / span


@dataclass(slots=True)
class CubicRate:
    """The learned launch rate of one partner (or one key of it)."""

    w_max: float | None = None  # the rate refused last; None: nothing learned
    since: datetime | None = None  # when that refusal came

    def rate(self, now: datetime) -> float | None:
        """Launches a second allowed now; None when nothing limits them."""
        if self.w_max is None or self.since is None:
            return None
        t = max((now - self.since).total_seconds(), 0.0)
        c = self.w_max * (1 - BETA) / K_SECONDS**3
        value = c * (t - K_SECONDS) ** 3 + self.w_max
        if value > FORGET_ABOVE * self.w_max:
            return None
        return max(value, MIN_RATE)

    def refused(self, now: datetime, *, launched_at: datetime, measured: float) -> bool:
        """A refusal that said nothing, of a try launched at ``launched_at`` while hipq
        launched ``measured`` a second; True when it lowered the rate."""
        if self.since is not None and launched_at <= self.since:
            return False  # launched before the last decrease: the same event
        current = self.rate(now)
        basis = measured if current is None else min(current, max(measured, MIN_RATE))
        self.w_max = max(basis, MIN_RATE)
        self.since = now
        return True

    def forget_if_stale(self, now: datetime) -> None:
        if self.w_max is not None and self.rate(now) is None:
            self.w_max = self.since = None


PACE_SECONDS = 0.05  # launches at a learned rate go in groups at most this far apart


@dataclass(slots=True)
class Pacer:
    """Launches at a learned rate, spread out: a token bucket that fills at the rate
    and holds at most :data:`PACE_SECONDS` of it (at least one launch), so a partner
    sees small groups every few tens of milliseconds rather than a burst a second."""

    tokens: float = 1.0
    at: datetime | None = None

    @staticmethod
    def burst(rate: float) -> float:
        return max(1.0, rate * PACE_SECONDS)

    def _fill(self, rate: float, now: datetime) -> None:
        if self.at is not None:
            elapsed = max((now - self.at).total_seconds(), 0.0)
            self.tokens = min(self.burst(rate), self.tokens + rate * elapsed)
        else:
            self.tokens = self.burst(rate)
        self.at = now

    def allow(self, rate: float, now: datetime, wanted: int) -> int:
        """How many of ``wanted`` launches may go now (taken from the bucket)."""
        self._fill(rate, now)
        allowed = min(wanted, int(self.tokens + 1e-9))
        self.tokens -= allowed
        return allowed

    def next_at(self, rate: float, now: datetime) -> datetime:
        """When the bucket is full again: the time to look for the next group."""
        self._fill(rate, now)
        missing = max(self.burst(rate) - self.tokens, 0.0)
        return now + timedelta(seconds=missing / rate)

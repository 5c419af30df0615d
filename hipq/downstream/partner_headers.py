"""The header families the test partner (:mod:`hipq.downstream.partner`) writes on
its answers, describing one key's buckets the way each vendor documents them and
the way :mod:`hipq.partners.headers` reads them back.

* ``ietf``: the structured fields of the IETF draft, one member per bucket::

      RateLimit-Policy: "requests-60s";q=500;w=60, "cost-60s";q=90000;w=60;qu="cost"
      RateLimit: "requests-60s";r=499;t=60, "cost-60s";r=89500;t=60

  ``q`` the amount, ``w`` the window in seconds, ``qu`` the unit (``requests``
  left out, as the draft's default; ``"cost"`` is this partner's own), ``r`` what
  is left, ``t`` whole seconds until the reset.
* ``ietf-older``: ``RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` of the tightest
  requests bucket (the earlier drafts), reset in whole seconds.
* ``x-ratelimit``: ``X-RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` of the tightest
  requests bucket, reset in whole seconds.
* ``openai``: ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` (the
  tightest requests bucket and the tightest cost bucket), resets as Go durations
  (``20ms``, ``1.5s``, ``6m0s``).
* ``anthropic``: ``anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}``,
  resets as RFC 3339 times in whole seconds (``2026-01-05T12:00:01Z``).

The tightest bucket of a unit is the one with the least left (of two alike, the
one that resets later). A remaining count is rounded down and a reset up, so a
reader never believes in more room, or sooner, than there is.

Pure: no I/O library; the time is given.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Literal

from hipq.downstream.partner_buckets import BucketView, Unit

Family = Literal["ietf", "ietf-older", "x-ratelimit", "openai", "anthropic"]
FAMILIES: tuple[Family, ...] = ("ietf", "ietf-older", "x-ratelimit", "openai", "anthropic")


def write(families: Iterable[Family], views: Sequence[BucketView],
          now: datetime) -> dict[str, str]:
    """The fields of ``families`` for one key's buckets (``now``: wall time, UTC)."""
    headers: dict[str, str] = {}
    for family in families:
        headers |= _WRITERS[family](views, now)
    return headers


def amount(value: float) -> str:
    """A limit or a cost: whole when it is, else up to three decimals."""
    if value == int(value):
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def go_duration(seconds: float) -> str:
    """Seconds as Go prints a ``time.Duration``, to the millisecond rounded up:
    ``0s``, ``20ms``, ``1.5s``, ``6m0s``, ``1h2m3.25s``."""
    ms = math.ceil(max(seconds, 0.0) * 1000 - 1e-6)
    if ms <= 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    text = amount(rest / 1000) + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def rfc3339(when: datetime) -> str:
    """An aware time in UTC as RFC 3339, rounded up to the whole second."""
    if when.microsecond:
        when = when.replace(microsecond=0) + timedelta(seconds=1)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _left(view: BucketView) -> str:
    return str(math.floor(view.remaining + 1e-9))


def _whole_seconds(seconds: float) -> str:
    return str(max(math.ceil(seconds - 1e-9), 0))


def tightest(views: Sequence[BucketView], unit: Unit) -> BucketView | None:
    of_unit = [v for v in views if v.unit == unit]
    return min(of_unit, key=lambda v: (v.remaining, -v.reset_in)) if of_unit else None


def _ietf(views: Sequence[BucketView], _now: datetime) -> dict[str, str]:
    if not views:
        return {}
    policy, state = [], []
    for v in views:
        unit = "" if v.unit == "requests" else f';qu="{v.unit}"'
        policy.append(f'"{v.name}";q={amount(v.limit)};w={amount(v.per_seconds)}{unit}')
        state.append(f'"{v.name}";r={_left(v)};t={_whole_seconds(v.reset_in)}')
    return {"RateLimit-Policy": ", ".join(policy), "RateLimit": ", ".join(state)}


def _three(prefix: str, views: Sequence[BucketView]) -> dict[str, str]:
    v = tightest(views, "requests")
    if v is None:
        return {}
    return {f"{prefix}-Limit": amount(v.limit), f"{prefix}-Remaining": _left(v),
            f"{prefix}-Reset": _whole_seconds(v.reset_in)}


def _ietf_older(views: Sequence[BucketView], _now: datetime) -> dict[str, str]:
    return _three("RateLimit", views)


def _x_ratelimit(views: Sequence[BucketView], _now: datetime) -> dict[str, str]:
    return _three("X-RateLimit", views)


_VENDOR_KINDS: tuple[tuple[Unit, str], ...] = (("requests", "requests"), ("cost", "tokens"))


def _openai(views: Sequence[BucketView], _now: datetime) -> dict[str, str]:
    headers: dict[str, str] = {}
    for unit, kind in _VENDOR_KINDS:
        v = tightest(views, unit)
        if v is not None:
            headers |= {f"x-ratelimit-limit-{kind}": amount(v.limit),
                        f"x-ratelimit-remaining-{kind}": _left(v),
                        f"x-ratelimit-reset-{kind}": go_duration(v.reset_in)}
    return headers


def _anthropic(views: Sequence[BucketView], now: datetime) -> dict[str, str]:
    headers: dict[str, str] = {}
    for unit, kind in _VENDOR_KINDS:
        v = tightest(views, unit)
        if v is not None:
            prefix = f"anthropic-ratelimit-{kind}"
            reset = rfc3339(now + timedelta(seconds=v.reset_in))
            headers |= {f"{prefix}-limit": amount(v.limit), f"{prefix}-remaining": _left(v),
                        f"{prefix}-reset": reset}
    return headers


_WRITERS = {"ietf": _ietf, "ietf-older": _ietf_older, "x-ratelimit": _x_ratelimit,
            "openai": _openai, "anthropic": _anthropic}

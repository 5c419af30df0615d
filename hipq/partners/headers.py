"""What a partner's answer says about its budget, read from the header families
partners send, into one shape (docs/throttling.md, "Partners").

Families read, each only when its headers are present:

* the IETF fields: ``RateLimit-Policy: "burst";q=100;w=60`` with
  ``RateLimit: "burst";r=50;t=30`` (the structured form), and the older
  ``RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` (or ``RateLimit: limit=10,
  remaining=0, reset=3``), resets in seconds;
* ``X-RateLimit-Limit`` / ``-Remaining`` / ``-Reset``, the reset in seconds or, when
  larger than a year, as an epoch time (GitHub's convention);
* OpenAI's ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``, resets as Go
  durations (``20ms``, ``6m0s``, ``1h2m3.5s``): the time until the bucket is full
  again (a token bucket: it refills linearly until then);
* Anthropic's ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
  {limit,remaining,reset}``, resets as RFC 3339 times (a token bucket, too);
* ``Retry-After``: whole seconds or an HTTP date.

Every value is read strictly: a number is ASCII digits (a superscript two or an
Arabic-Indic digit is not), a time is a well-formed one; anything else leaves that
bucket (or that time) out and is never an error. A remaining count below zero is
read as zero (an overdrawn budget). Every time lies between ``now`` and
``now + max_seconds``: a partner's year-9999 reset cannot pause anything for longer
than the setting allows.

Pure: no I/O library; ``now`` is given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Literal

Unit = Literal["requests", "cost"]
EPOCH_AFTER_SECONDS = 365 * 24 * 3600.0  # a reset larger than this is an epoch time
MAX_DIGITS = 15  # a count or a number of seconds longer than this is not believed

_NUMBER = re.compile(rf"-?[0-9]{{1,{MAX_DIGITS}}}(?:\.[0-9]{{1,9}})?", re.ASCII)
_GO_PART = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)(h|ms|us|µs|ns|m|s)", re.ASCII)
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6,
             "ns": 1e-9}


@dataclass(frozen=True, slots=True)
class ReportedBucket:
    """One budget as the partner reported it."""

    name: str  # "requests", "tokens", "input-tokens", an IETF policy's name...
    unit: Unit  # what a launch takes from it: one request, or its cost
    remaining: float  # never below zero
    reset_at: datetime  # when the window starts again, or the bucket is full again
    limit: float | None = None
    refills: bool = False  # a token bucket: room comes back linearly until reset_at
    window_seconds: float | None = None  # the window's length, where the partner says


@dataclass(frozen=True, slots=True)
class PartnerReport:
    """Everything one answer said about the budget; empty when it said nothing."""

    family: str | None = None  # "ietf", "x-ratelimit", "openai", "anthropic"
    buckets: tuple[ReportedBucket, ...] = ()
    retry_at: datetime | None = None  # Retry-After, as a time

    @property
    def says_anything(self) -> bool:
        return bool(self.buckets) or self.retry_at is not None

    def spent(self) -> ReportedBucket | None:
        """The bucket with nothing left that frees last, if any is spent."""
        empty = [b for b in self.buckets if b.remaining <= 0]
        return max(empty, key=lambda b: b.reset_at) if empty else None


def read(headers: Mapping[str, str] | Iterable[tuple[str, str]], now: datetime, *,
         max_seconds: float) -> PartnerReport:
    """The budget an answer's headers report (``headers``: any mapping or pairs; the
    first of a repeated name counts; names in any case)."""
    h: dict[str, str] = {}
    for name, value in (headers.items() if isinstance(headers, Mapping) else headers):
        h.setdefault(name.lower(), value)
    latest = now + timedelta(seconds=max_seconds)
    retry_at = _retry_after(h.get("retry-after"), now, latest)
    for family, reader in _FAMILIES:
        buckets = reader(h, now, latest)
        if buckets:
            return PartnerReport(family, tuple(buckets), retry_at)
    return PartnerReport(None, (), retry_at)


# -- values -------------------------------------------------------------------------


def number(raw: str | None) -> float | None:
    """A plain ASCII decimal number (``-3``, ``12``, ``0.5``), else None."""
    if raw is None:
        return None
    raw = raw.strip()
    return float(raw) if _NUMBER.fullmatch(raw) else None


def go_duration(raw: str | None) -> float | None:
    """Seconds of a Go duration (``20ms``, ``6m0s``, ``1h2m3.5s``) or a plain number
    of seconds, else None."""
    if raw is None:
        return None
    raw = raw.strip()
    plain = number(raw)
    if plain is not None:
        return plain if plain >= 0 else None
    total, at = 0.0, 0
    for part in _GO_PART.finditer(raw):
        if part.start() != at:
            return None
        total += float(part.group(1)) * _GO_UNITS[part.group(2)]
        at = part.end()
    return total if at == len(raw) and at > 0 else None


def _clamp(when: datetime, now: datetime, latest: datetime) -> datetime:
    return min(max(when, now), latest)


def _after(seconds: float | None, now: datetime, latest: datetime) -> datetime | None:
    if seconds is None or seconds < 0:
        return None
    if seconds >= (latest - now).total_seconds():
        return latest
    return now + timedelta(seconds=seconds)


def _rfc3339(raw: str | None, now: datetime, latest: datetime) -> datetime | None:
    if raw is None or not raw.isascii():
        return None
    try:
        when = datetime.fromisoformat(raw.strip())
    except ValueError:
        return None
    return None if when.tzinfo is None else _clamp(when.astimezone(UTC), now, latest)


def _seconds_or_epoch(raw: str | None, now: datetime, latest: datetime) -> datetime | None:
    value = number(raw)
    if value is None or value < 0:
        return None
    if value <= EPOCH_AFTER_SECONDS:
        return _after(value, now, latest)
    try:
        return _clamp(datetime.fromtimestamp(value, UTC), now, latest)
    except (OverflowError, OSError, ValueError):
        return None


def _retry_after(raw: str | None, now: datetime, latest: datetime) -> datetime | None:
    """``Retry-After``: whole ASCII seconds or an HTTP date (in GMT)."""
    if raw is None or not raw.isascii():
        return None
    raw = raw.strip()
    if raw.isdigit():
        return _after(float(raw[:MAX_DIGITS]), now, latest)
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    return _clamp(when.astimezone(UTC), now, latest)


def _remaining(raw: str | None) -> float | None:
    value = number(raw)
    return None if value is None else max(value, 0.0)


def _limit(raw: str | None) -> float | None:
    value = number(raw)
    return value if value is not None and value > 0 else None


# -- families -----------------------------------------------------------------------


def _ietf(h: dict[str, str], now: datetime, latest: datetime) -> list[ReportedBucket]:
    if "ratelimit" in h:
        structured = _ietf_structured(h, now, latest)
        if structured:
            return structured
        params = _params(h["ratelimit"].replace(";", ","))
        remaining, reset = params.get("remaining"), params.get("reset")
        limit = params.get("limit")
    else:
        remaining, reset = h.get("ratelimit-remaining"), h.get("ratelimit-reset")
        limit = h.get("ratelimit-limit")
    return _one("requests", "requests", remaining, _seconds_or_epoch(reset, now, latest),
                limit)


def _ietf_structured(h: dict[str, str], now: datetime,
                     latest: datetime) -> list[ReportedBucket]:
    """``RateLimit: "name";r=..;t=..`` items, each with its policy's ``q``/``w``/``qu``."""
    policies = dict(_items(h.get("ratelimit-policy", "")))
    out = []
    for name, params in _items(h["ratelimit"]):
        remaining = _remaining(params.get("r"))
        reset = _after(number(params.get("t")), now, latest) if "t" in params else None
        policy = policies.get(name, {})
        window = _limit(policy.get("w"))
        if reset is None and window is not None:
            reset = _after(window, now, latest)
        if remaining is None or reset is None:
            continue
        unit: Unit = "requests" if policy.get("qu", "requests") == "requests" else "cost"
        out.append(ReportedBucket(name or "default", unit, remaining, reset,
                                  limit=_limit(policy.get("q")), window_seconds=window))
    return out


def _items(field: str) -> list[tuple[str, dict[str, str]]]:
    """The members of a structured list (``"burst";q=100;w=60, "daily";q=1000``):
    (name, {param: value}), at most 16; empty when the field has no parameters
    (the older ``limit=10, remaining=0`` form)."""
    if ";" not in field:
        return []
    out = []
    for member in field.split(",")[:16]:
        name, _, params = member.partition(";")
        name = name.strip().strip('"')
        if "=" in name or len(name) > 64:
            continue
        out.append((name, _params(params.replace(";", ","))))
    return out


def _params(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        name, eq, value = part.partition("=")
        if eq:
            out.setdefault(name.strip().lower(), value.strip().strip('"'))
    return out


def _x_ratelimit(h: dict[str, str], now: datetime, latest: datetime) -> list[ReportedBucket]:
    reset = _seconds_or_epoch(h.get("x-ratelimit-reset"), now, latest)
    return _one("requests", "requests", h.get("x-ratelimit-remaining"), reset,
                h.get("x-ratelimit-limit"))


def _openai(h: dict[str, str], now: datetime, latest: datetime) -> list[ReportedBucket]:
    out = []
    kinds: tuple[tuple[str, Unit], ...] = (("requests", "requests"), ("tokens", "cost"))
    for kind, unit in kinds:
        reset = _after(go_duration(h.get(f"x-ratelimit-reset-{kind}")), now, latest)
        out += _one(kind, unit, h.get(f"x-ratelimit-remaining-{kind}"), reset,
                    h.get(f"x-ratelimit-limit-{kind}"), refills=True)
    return out


def _anthropic(h: dict[str, str], now: datetime, latest: datetime) -> list[ReportedBucket]:
    out = []
    for kind in ("requests", "tokens", "input-tokens", "output-tokens"):
        prefix = f"anthropic-ratelimit-{kind}"
        reset = _rfc3339(h.get(f"{prefix}-reset"), now, latest)
        unit: Unit = "requests" if kind == "requests" else "cost"
        out += _one(kind, unit, h.get(f"{prefix}-remaining"), reset, h.get(f"{prefix}-limit"),
                    refills=True)
    return out


def _one(name: str, unit: Unit, remaining: str | None, reset: datetime | None,
         limit: str | None, *, refills: bool = False) -> list[ReportedBucket]:
    left = _remaining(remaining)
    if left is None or reset is None:
        return []
    return [ReportedBucket(name, unit, left, reset, limit=_limit(limit), refills=refills)]


_FAMILIES = (("anthropic", _anthropic), ("openai", _openai), ("ietf", _ietf),
             ("x-ratelimit", _x_ratelimit))

"""Time windows: when a job may launch, as times of day in a timezone.

``[{"start": "05:00", "end": "07:00"}, {"start": "22:00", "end": "02:00"}]``: each
window is a half-open local interval ``[start, end)``; ``end <= start`` crosses
midnight; ``start == end`` is empty (never open). Local times are turned into
absolute instants with ``zoneinfo`` day by day, so windows are DST-correct: a
window inside a skipped hour does not exist that day, and a window across a
repeated hour lasts an hour longer.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from hipq.clock import utc
from hipq.jobs import Job
from hipq.spec import QueueSpec

SEARCH_DAYS = 9  # every non-empty daily window opens within this horizon


@lru_cache(maxsize=256)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def _hm(text: str) -> time:
    hours, minutes = text.split(":")
    return time(int(hours), int(minutes))


def _pairs(windows: Sequence[Mapping[str, str]]) -> list[tuple[time, time]]:
    return [(_hm(w["start"]), _hm(w["end"])) for w in windows]


def _instant(day: date, at: time, zone: ZoneInfo) -> datetime:
    """The UTC instant of a local wall time: its first occurrence if repeated (fall
    back); if skipped (spring forward), the instant the gap ends. (zoneinfo maps a
    skipped time with the old offset, past the gap's end: a window ending at 02:30
    on a 02:00->03:00 day would stay open until 03:30.)"""
    wall = datetime.combine(day, at)
    first = wall.replace(tzinfo=zone).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first
    low = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)  # before the gap
    high = first  # after it: bisect to the transition, to the second
    while (high - low).total_seconds() > 1:
        mid = low + timedelta(seconds=(high - low).total_seconds() // 2)
        if mid.astimezone(zone).replace(tzinfo=None) >= wall:
            high = mid
        else:
            low = mid
    return high


def _intervals(windows: Sequence[Mapping[str, str]], tz: str,
               around: datetime) -> Iterator[tuple[datetime, datetime]]:
    zone = _zone(tz)
    first: date = around.astimezone(zone).date() - timedelta(days=1)
    for offset in range(SEARCH_DAYS + 1):
        day = first + timedelta(days=offset)
        for start, end in _pairs(windows):
            if start == end:
                continue
            end_day = day + timedelta(days=1) if end <= start else day
            opens, closes = _instant(day, start, zone), _instant(end_day, end, zone)
            if closes > opens:
                yield opens, closes


def is_open(windows: Sequence[Mapping[str, str]] | None, tz: str, at: datetime) -> bool:
    """Whether ``at`` is inside one of the windows (no windows: always open)."""
    if not windows:
        return True
    at = utc(at)
    return any(opens <= at < closes for opens, closes in _intervals(windows, tz, at))


def next_open(windows: Sequence[Mapping[str, str]] | None, tz: str,
              at: datetime) -> datetime | None:
    """``at`` if a window is open then, else the next opening; None if none opens
    (every window is empty)."""
    if not windows:
        return utc(at)
    at = utc(at)
    best: datetime | None = None
    for opens, closes in _intervals(windows, tz, at):
        if opens <= at < closes:
            return at
        if opens > at and (best is None or opens < best):
            best = opens
    return best


def validate(windows: Sequence[Mapping[str, str]], tz: str) -> None:
    """Raise ValueError for a timezone zoneinfo does not know, a malformed time, or
    windows that can never open."""
    try:
        _zone(tz)
    except (KeyError, ValueError):
        raise ValueError(f"unknown timezone {tz!r}") from None
    for window in windows:
        for key in ("start", "end"):
            try:
                _hm(window[key])
            except (KeyError, ValueError):
                raise ValueError(f"time window {dict(window)!r}: {key} must be HH:MM "
                                 "(00:00-23:59)") from None
    if windows and next_open(windows, tz, datetime(2026, 1, 1, tzinfo=UTC)) is None:
        raise ValueError("the time windows can never open (every window is empty: "
                         "start equals end)")


def windows_of(job: Job, queue: QueueSpec) -> tuple[Sequence[Mapping[str, str]] | None, str]:
    """A job's time windows (its own, else the queue's) and their timezone."""
    windows: Sequence[Mapping[str, str]] | None = job.time_windows
    if windows is None:
        windows = queue.time_windows
    return windows, job.timezone or queue.timezone

"""Time windows (docs/throttling.md): DST-correct local windows, windows across midnight,
several windows per job, scheduling at enqueue and rescheduling at fetch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pydantic
import pytest
from pydantic import ValidationError as PydanticValidationError

from hipq.config import QueueConfig, parse_settings
from hipq.errors import ConfigError, ValidationError
from hipq.throttling import is_open, next_open
from tests.throttling._helpers import MEMORY_TARGET, Harness, window_open


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"

# (zone, window, search from, expected next opening, instants inside, instants outside)
DST_CASES = [
    pytest.param(BERLIN, ("06:00", "07:00"), utc(2026, 3, 28, 12), utc(2026, 3, 29, 4),
                 [utc(2026, 3, 29, 4, 59)], [utc(2026, 3, 29, 5)], id="berlin-spring-after-gap"),
    pytest.param(BERLIN, ("06:00", "07:00"), utc(2026, 3, 27, 12), utc(2026, 3, 28, 5),
                 [], [utc(2026, 3, 28, 4, 30)], id="berlin-day-before-spring"),
    pytest.param(BERLIN, ("02:15", "02:45"), utc(2026, 3, 28, 12), utc(2026, 3, 30, 0, 15),
                 [], [utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 30)],
                 id="berlin-spring-window-inside-the-skipped-hour-does-not-exist"),
    pytest.param(BERLIN, ("01:30", "02:30"), utc(2026, 3, 28, 12), utc(2026, 3, 29, 0, 30),
                 [utc(2026, 3, 29, 0, 59)], [utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 15)],
                 id="berlin-spring-window-ending-in-the-gap-closes-at-the-jump"),
    pytest.param(BERLIN, ("02:30", "04:00"), utc(2026, 3, 28, 12), utc(2026, 3, 29, 1),
                 [utc(2026, 3, 29, 1), utc(2026, 3, 29, 1, 59)],
                 [utc(2026, 3, 29, 0, 59), utc(2026, 3, 29, 2)],
                 id="berlin-spring-window-starting-in-the-gap-opens-at-the-jump"),
    pytest.param(BERLIN, ("06:00", "07:00"), utc(2026, 10, 24, 12), utc(2026, 10, 25, 5),
                 [utc(2026, 10, 25, 5, 59)], [utc(2026, 10, 25, 4, 30)], id="berlin-fall"),
    pytest.param(BERLIN, ("02:00", "03:00"), utc(2026, 10, 24, 12), utc(2026, 10, 25, 0),
                 [utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30)], [utc(2026, 10, 25, 2)],
                 id="berlin-fall-repeated-hour-lasts-two-hours"),
    pytest.param(NEW_YORK, ("06:00", "07:00"), utc(2026, 3, 7, 18), utc(2026, 3, 8, 10),
                 [utc(2026, 3, 8, 10, 59)], [utc(2026, 3, 8, 11)], id="new-york-spring"),
    pytest.param(NEW_YORK, ("01:00", "04:00"), utc(2026, 3, 7, 18), utc(2026, 3, 8, 6),
                 [utc(2026, 3, 8, 7, 59)], [utc(2026, 3, 8, 8)],
                 id="new-york-spring-window-across-the-gap-is-two-hours"),
    pytest.param(NEW_YORK, ("02:00", "02:30"), utc(2026, 3, 7, 18), utc(2026, 3, 9, 6),
                 [], [utc(2026, 3, 8, 7, 15)], id="new-york-spring-skipped-window"),
    pytest.param(NEW_YORK, ("06:00", "07:00"), utc(2026, 10, 31, 18), utc(2026, 11, 1, 11),
                 [utc(2026, 11, 1, 11, 59)], [utc(2026, 11, 1, 10, 30)], id="new-york-fall"),
    pytest.param(NEW_YORK, ("01:00", "02:00"), utc(2026, 10, 31, 18), utc(2026, 11, 1, 5),
                 [utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30)], [utc(2026, 11, 1, 7)],
                 id="new-york-fall-repeated-hour-lasts-two-hours"),
]


@pytest.mark.parametrize(("zone", "window", "start", "opening", "inside", "outside"), DST_CASES)
def test_dst_transitions(zone: str, window: tuple[str, str], start: datetime,
                         opening: datetime, inside: list[datetime],
                         outside: list[datetime]) -> None:
    windows = [{"start": window[0], "end": window[1]}]
    assert next_open(windows, zone, start) == opening
    assert is_open(windows, zone, opening)
    assert is_open(windows, zone, opening - timedelta(seconds=1)) is False
    for at in inside:
        assert is_open(windows, zone, at), at
        assert window_open(windows, zone, at), at  # the oracle agrees
    for at in outside:
        assert not is_open(windows, zone, at), at
        assert not window_open(windows, zone, at), at


def test_window_across_midnight() -> None:
    windows = [{"start": "22:00", "end": "02:00"}]
    assert is_open(windows, "UTC", utc(2026, 1, 5, 23))
    assert is_open(windows, "UTC", utc(2026, 1, 6, 1, 59))
    assert not is_open(windows, "UTC", utc(2026, 1, 6, 2))
    assert not is_open(windows, "UTC", utc(2026, 1, 5, 21, 59))
    assert next_open(windows, "UTC", utc(2026, 1, 5, 12)) == utc(2026, 1, 5, 22)
    assert next_open(windows, "UTC", utc(2026, 1, 6, 1)) == utc(2026, 1, 6, 1)
    # across midnight and a DST change at once: Berlin's 22:00-04:00 on the night of
    # the spring change is an hour shorter (21:00Z to 02:00Z)
    berlin = [{"start": "22:00", "end": "04:00"}]
    assert next_open(berlin, BERLIN, utc(2026, 3, 28, 12)) == utc(2026, 3, 28, 21)
    assert is_open(berlin, BERLIN, utc(2026, 3, 29, 1, 59))
    assert not is_open(berlin, BERLIN, utc(2026, 3, 29, 2))


def test_several_windows() -> None:
    windows = [{"start": "05:00", "end": "07:00"}, {"start": "13:00", "end": "14:00"}]
    assert next_open(windows, "UTC", utc(2026, 1, 5, 8)) == utc(2026, 1, 5, 13)
    assert next_open(windows, "UTC", utc(2026, 1, 5, 14, 30)) == utc(2026, 1, 6, 5)
    assert is_open(windows, "UTC", utc(2026, 1, 5, 6, 59))
    assert not is_open(windows, "UTC", utc(2026, 1, 5, 7))


def test_never_open_windows_are_rejected_at_queue_creation() -> None:
    with pytest.raises(pydantic.ValidationError, match="never open"):
        QueueConfig(id="q", target=MEMORY_TARGET, time_windows=[{"start": "05:00",
                                                                   "end": "05:00"}])
    with pytest.raises(ConfigError, match="never open"):
        parse_settings({"queues": [{"id": "q", "time_windows": [
            {"start": "09:30", "end": "09:30"}, {"start": "10:00", "end": "10:00"}]}]})


# -- through the database: enqueue-time scheduling and fetch-time rescheduling ------


async def test_enqueue_without_run_after_goes_to_the_first_open_time(h: Harness) -> None:
    h.clock.set(utc(2026, 1, 5, 12))
    await h.create(time_windows=[{"start": "05:00", "end": "07:00"},
                                 {"start": "20:00", "end": "21:00"}])
    outcome = await h.enqueue("a")
    assert outcome.job is not None
    assert outcome.job.run_at == utc(2026, 1, 5, 20)
    inside = await h.enqueue("b", run_after=utc(2026, 1, 6, 6, 30))
    assert inside.job is not None
    assert inside.job.run_at == utc(2026, 1, 6, 6, 30)
    outside = await h.enqueue("c", run_after=utc(2026, 1, 6, 7))
    assert outside.job is not None
    assert outside.job.run_at == utc(2026, 1, 6, 20)
    # a job's own windows and timezone override the queue's
    own = await h.enqueue("d", time_windows=[{"start": "09:00", "end": "10:00"}],
                          timezone=NEW_YORK)
    assert own.job is not None
    assert own.job.run_at == utc(2026, 1, 5, 14)
    now_open = await h.enqueue("e", time_windows=[{"start": "11:00", "end": "13:00"}])
    assert now_open.job is not None
    assert now_open.job.run_at == utc(2026, 1, 5, 12)


async def test_never_open_window_is_rejected_at_enqueue(h: Harness) -> None:
    await h.create()
    with pytest.raises(ValidationError, match="never open"):
        await h.enqueue("a", time_windows=[{"start": "05:00", "end": "05:00"}])
    with pytest.raises(PydanticValidationError, match="unknown timezone"):  # at the door
        await h.enqueue("b", time_windows=[{"start": "05:00", "end": "06:00"}],
                        timezone="Mars/Olympus")
    assert await h.store.job_get(h.queue_id, "a") is None


@pytest.mark.parametrize(("zone", "start", "opening"), [
    (BERLIN, utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 4)),
    (BERLIN, utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 5)),
    (NEW_YORK, utc(2026, 3, 8, 5), utc(2026, 3, 8, 10)),
    (NEW_YORK, utc(2026, 11, 1, 5), utc(2026, 11, 1, 11)),
], ids=["berlin-spring", "berlin-fall", "new-york-spring", "new-york-fall"])
async def test_launch_on_a_dst_day(h: Harness, zone: str, start: datetime,
                                   opening: datetime) -> None:
    """06:00-07:00 local on the day clocks change: scheduled at the right instant,
    not launched a second early, launched at the opening."""
    h.clock.set(start)
    await h.create(timezone=zone, time_windows=[{"start": "06:00", "end": "07:00"}])
    outcome = await h.enqueue("a")
    assert outcome.job is not None
    assert outcome.job.run_at == opening
    h.clock.set(opening - timedelta(seconds=1))
    assert await h.tick() == []
    h.clock.set(opening)
    assert [j.id for j in await h.tick()] == ["a"]


async def test_job_fetched_after_its_window_closed_is_rescheduled(h: Harness) -> None:
    h.clock.set(utc(2026, 1, 5, 10, 30))
    await h.create(concurrency=1, time_windows=[{"start": "10:00", "end": "11:00"}])
    await h.enqueue("a")
    await h.enqueue("b")
    assert [j.id for j in await h.tick()] == ["a"]  # b waits for capacity
    h.clock.set(utc(2026, 1, 5, 11, 5))
    await h.finish_running()
    assert await h.tick() == []  # b's window closed: rescheduled, not launched
    b = await h.job("b")
    assert b.status == "queued"
    assert b.run_at == utc(2026, 1, 6, 10)
    assert b.key_order_at == utc(2026, 1, 5, 10, 30)  # its place in its key is kept
    h.clock.set(utc(2026, 1, 6, 9, 59))
    assert await h.tick() == []
    h.clock.set(utc(2026, 1, 6, 10))
    assert [j.id for j in await h.tick()] == ["b"]
    assert h.launched_ids() == ["a", "b"]


async def test_midnight_window_through_the_loop(h: Harness) -> None:
    h.clock.set(utc(2026, 1, 5, 12))
    await h.create(time_windows=[{"start": "23:30", "end": "00:30"}])
    outcome = await h.enqueue("a")
    assert outcome.job is not None
    assert outcome.job.run_at == utc(2026, 1, 5, 23, 30)
    h.clock.set(utc(2026, 1, 6, 0, 10))  # after midnight, still inside
    late = await h.enqueue("b")
    assert late.job is not None
    assert late.job.run_at == utc(2026, 1, 6, 0, 10)
    assert sorted(j.id for j in await h.tick()) == ["a", "b"]

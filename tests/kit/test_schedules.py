"""Recurring schedules (docs/configuration.md, ``schedules``) on SQLite and PostgreSQL, with daemons
under a FakeClock: one job per fire time across a restart and across two daemons,
``catch_up`` after downtime (last 24 h, oldest first), ``GET /v1/schedules``, and
the config errors of ``check-config`` and ``run``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from hipq.client import AsyncClient
from hipq.config import QueueConfig, ScheduleConfig, Settings
from hipq.daemon import Daemon
from hipq.errors import ConfigError
from hipq.schedules import cron_trigger, crontab_weekdays, fire_job_id, fire_times
from hipq.service import Hipq
from hipq.store import open_store
from hipq.store import schema as s
from hipq.testing import FakeClock
from tests.api.conftest import ADMIN, LiveFactory
from tests.kit.conftest import child_env

START = datetime(2026, 1, 5, 12, 0, 30, tzinfo=UTC)
QUEUES = [{"id": "reports", "paused": True}]
EVERY5 = {"id": "every5", "queue": "reports", "cron": "*/5 * * * *", "data": {"kind": "r"}}


def at(hour: int, minute: int, second: int = 0, day: int = 5) -> datetime:
    return datetime(2026, 1, day, hour, minute, second, tzinfo=UTC)


def fire_ids(schedule: str, *fires: datetime) -> list[str]:
    return [fire_job_id(schedule, f) for f in fires]


async def job_ids(daemon: Daemon, prefix: str) -> list[str]:
    """Every job of queue ``reports`` whose id starts with ``prefix:`` (live or archived)."""
    assert daemon.store is not None
    found: list[str] = []
    async with daemon.store.engine.connect() as conn:
        for table in (s.jobs, s.archived_jobs):
            rows = await conn.execute(sa.select(table.c.id).where(
                table.c.queue == "reports", table.c.id.startswith(f"{prefix}:")))
            found += [r.id for r in rows]
    return sorted(found)


async def run_once(daemon: Daemon) -> int:
    assert daemon.schedules is not None
    return await daemon.schedules.run_once()


async def test_one_job_per_fire_time_across_a_restart(live: LiveFactory) -> None:
    clock = FakeClock(START)
    catching = {**EVERY5, "id": "caught", "catch_up": True}
    first = await live(clock=clock, queues=QUEUES, schedules=[EVERY5, catching])
    clock.set(at(12, 5, 10))
    await run_once(first.daemon)
    clock.set(at(12, 10))  # exactly on a fire time: it is due
    await run_once(first.daemon)
    await run_once(first.daemon)  # nothing new: the same fires are not enqueued again
    assert await job_ids(first.daemon, "every5") == fire_ids("every5", at(12, 5), at(12, 10))
    first.stop.set()
    await first.task

    clock.set(at(12, 12))
    second = await live(clock=clock, queues=QUEUES, schedules=[EVERY5, catching])
    await run_once(second.daemon)  # "caught" enqueues 12:05 and 12:10 again: both exist
    clock.set(at(12, 15, 1))
    await run_once(second.daemon)
    expected = fire_ids("every5", at(12, 5), at(12, 10), at(12, 15))
    assert await job_ids(second.daemon, "every5") == expected
    assert await job_ids(second.daemon, "caught") == fire_ids(
        "caught", at(12, 5), at(12, 10), at(12, 15))
    assert second.daemon.service is not None
    job, _ = await second.daemon.service.get_job("reports", "every5:2026-01-05T12:15:00Z")
    assert (job.data, job.run_at) == ({"kind": "r"}, at(12, 15))


async def test_two_daemons_enqueue_each_fire_once(live: LiveFactory) -> None:
    clock = FakeClock(START)
    one = await live(clock=clock, queues=QUEUES, schedules=[EVERY5])
    two = await live(clock=clock, queues=QUEUES, schedules=[EVERY5])
    for minute in (20, 25):
        clock.set(at(12, minute))
        await asyncio.gather(run_once(one.daemon), run_once(two.daemon))
        await asyncio.gather(run_once(two.daemon), run_once(one.daemon))
    expected = fire_ids("every5", *(at(12, m) for m in (5, 10, 15, 20, 25)))
    assert await job_ids(one.daemon, "every5") == expected


async def test_catch_up_enqueues_the_missed_fires_of_the_last_day(live: LiveFactory) -> None:
    clock = FakeClock(START)
    hourly = {"queue": "reports", "cron": "0 * * * *"}
    schedules = [{**hourly, "id": "caught", "catch_up": True}, {**hourly, "id": "skipped"}]
    first = await live(clock=clock, queues=QUEUES, schedules=schedules)
    first.stop.set()
    await first.task

    clock.set(START + timedelta(hours=30))  # down for 30 hours: 2026-01-06 18:00:30
    late = {**hourly, "id": "late", "catch_up": True}  # first seen now: nothing missed
    second = await live(clock=clock, queues=QUEUES, schedules=[*schedules, late])
    await run_once(second.daemon)  # (the daemon's own 1-second pass may have run first)
    missed = [at(19, 0) + timedelta(hours=n) for n in range(24)]  # (now - 24 h, now]
    assert await job_ids(second.daemon, "caught") == fire_ids("caught", *missed)
    assert await job_ids(second.daemon, "skipped") == []
    assert await job_ids(second.daemon, "late") == []
    assert second.daemon.store is not None
    async with second.daemon.store.engine.connect() as conn:
        rows = (await conn.execute(sa.select(s.jobs.c.id, s.jobs.c.run_at).where(
            s.jobs.c.id.startswith("caught:")).order_by(s.jobs.c.run_at))).all()
    # each job runs at its fire time, so the queue launches the oldest fire first
    assert [(r.id, r.run_at.replace(tzinfo=UTC)) for r in rows] == list(
        zip(fire_ids("caught", *missed), missed, strict=True))
    clock.advance(hours=1)
    await run_once(second.daemon)
    for schedule in ("caught", "skipped", "late"):
        assert (await job_ids(second.daemon, schedule))[-1:] == fire_ids(schedule, at(19, 0, day=6))


async def test_schedules_route_shows_the_next_fire_time(live: LiveFactory) -> None:
    clock = FakeClock(START)
    paris = {"id": "nightly", "queue": "reports", "cron": "0 2 * * *",
             "timezone": "Europe/Paris", "catch_up": True}
    daemon = await live(clock=clock, queues=QUEUES, schedules=[EVERY5, paris])
    async with AsyncClient(daemon.api.base, token=ADMIN) as hipq:
        listed = {x.id: x for x in await hipq.schedules()}
    assert listed["every5"].next_fire_time == at(12, 5)
    assert listed["every5"].data == {"kind": "r"}
    assert listed["nightly"].next_fire_time == at(1, 0, day=6)  # 02:00 in Paris (UTC+1)
    assert (listed["nightly"].timezone, listed["nightly"].catch_up) == ("Europe/Paris", True)


def _check(tmp_path: Path, db_url: str, schedules: list[dict[str, Any]],
           command: str = "check-config") -> subprocess.CompletedProcess[str]:
    config = {"database": {"url": db_url}, "api": {"port": 0},
              "queues": [{"id": "reports"}], "schedules": schedules}
    (tmp_path / "hipq.yaml").write_text(yaml.safe_dump(config))
    return subprocess.run([sys.executable, "-m", "hipq", "-c", "hipq.yaml", command],
                          cwd=tmp_path, env=child_env(), capture_output=True, text=True,
                          timeout=60, check=False)


async def test_config_errors_name_the_schedule(tmp_path: Path, db_url: str) -> None:
    store = await open_store(db_url)
    try:
        await Hipq(store).create_queue(QueueConfig(id="stored"))
    finally:
        await store.close()
    ok = _check(tmp_path, db_url, [EVERY5, {**EVERY5, "id": "db", "queue": "stored"}])
    assert ok.returncode == 0, ok.stderr
    assert "2 schedule(s)" in ok.stdout
    unknown = _check(tmp_path, db_url, [EVERY5, {**EVERY5, "id": "orphan", "queue": "nope"}])
    assert unknown.returncode == 2
    assert "schedules[1] (orphan): queue 'nope' is neither in the config nor in the " \
           "database" in unknown.stderr
    bad = _check(tmp_path, db_url, [{**EVERY5, "cron": "*/5 * * *"}])
    assert bad.returncode == 2
    assert "schedules[0] (every5): bad cron '*/5 * * *'" in bad.stderr
    out_of_range = _check(tmp_path, db_url, [{**EVERY5, "cron": "61 * * * *"}], "run")
    assert out_of_range.returncode == 2
    assert "schedules[0] (every5): bad cron" in out_of_range.stderr
    run = _check(tmp_path, db_url, [{**EVERY5, "id": "orphan", "queue": "nope"}], "run")
    assert run.returncode == 2
    assert "schedules[0] (orphan): queue 'nope'" in run.stderr
    assert "Traceback" not in run.stderr
    twice = _check(tmp_path, db_url, [EVERY5, EVERY5])
    assert twice.returncode == 2
    assert "declared twice" in twice.stderr


async def test_daemon_open_refuses_an_unknown_queue(db_url: str) -> None:
    settings = Settings.model_validate({"database": {"url": db_url}, "api": {"enabled": False},
                                        "schedules": [{**EVERY5, "queue": "nope"}]})
    daemon = Daemon(settings)
    with pytest.raises(ConfigError, match=r"schedules\[0\] \(every5\)"):
        await daemon.open()


def test_fire_times_are_the_cron_fires_in_order() -> None:
    trigger = cron_trigger(ScheduleConfig(id="x", queue="q", cron="30 1 * * 1-5",
                                          timezone="America/New_York"))
    fires = fire_times(trigger, at(0, 0, day=2), at(0, 0, day=10))
    # 01:30 in New York (UTC-5) on the weekdays Fri 2, Mon 5 .. Fri 9 January 2026
    assert fires == [at(6, 30, day=d) for d in (2, 5, 6, 7, 8, 9)]
    assert fire_job_id("x", fires[0]) == "x:2026-01-02T06:30:00Z"
    assert fire_times(trigger, fires[0], fires[0]) == []  # (after, until]: after excluded


@pytest.mark.parametrize(("field", "days"), [
    ("*", "*"), ("1-5", "mon,tue,wed,thu,fri"), ("0", "sun"), ("7", "sun"), ("0,6", "sun,sat"),
    ("*/2", "sun,tue,thu,sat"), ("mon-fri", "mon-fri"), ("5-7", "fri,sat,sun")])
def test_crontab_weekdays_count_from_sunday(field: str, days: str) -> None:
    assert crontab_weekdays(field) == days


@pytest.mark.parametrize("cron", ["* * * *", "61 * * * *", "* * * * 8", "* * * * 1/0",
                                  "* 25 * * *", "* * * * * *"])
def test_bad_cron_strings_are_config_errors(cron: str) -> None:
    with pytest.raises(ConfigError, match="bad cron"):
        cron_trigger(ScheduleConfig(id="x", queue="q", cron=cron))

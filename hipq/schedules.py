"""Recurring schedules (docs/configuration.md): one idempotent enqueue per cron fire time.

State model. Fire times come from APScheduler 3's ``CronTrigger`` in the
schedule's timezone. A fire becomes the job ``<schedule id>:<fire time UTC as
YYYY-MM-DDTHH:MM:SSZ>`` with ``run_after`` = the fire time, so the store's
idempotent enqueue is the only coordination: after a restart, or with several
daemons each calling the enqueue for the same fire, exactly one job exists (the
others get ``exists``).

Each daemon keeps, per schedule, the instant up to which it has enqueued (in
memory). On start that instant is the current time (fires missed while no daemon
ran are skipped), or with ``catch_up: true`` the latest of "first seen" and 24 h
ago (every missed fire of the last day is enqueued, oldest first). "First seen"
is persisted once per schedule id in the store's meta table
(``meta_get_or_set``), so nothing counts as missed before a schedule existed.

Failure modes: a pass that cannot enqueue (database down) keeps its instant and
tries the same fires again on the next pass (idempotent); a schedule whose queue
has been deleted logs an error and moves on.
"""

from __future__ import annotations

import asyncio
import logging
import zoneinfo
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from hipq.bodies import EnqueueRequest
from hipq.clock import Clock
from hipq.config import ScheduleConfig, Settings
from hipq.errors import ConfigError, HipqError, QueueNotFound
from hipq.service import Hipq
from hipq.store import InsertStatus

if TYPE_CHECKING:
    from apscheduler.triggers.cron import CronTrigger

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # how often the daemon looks for due fires
CATCH_UP_WINDOW = timedelta(hours=24)
MAX_FIRES_PER_PASS = 2000  # a 24 h catch-up of a per-minute cron is 1,440
_TICK = timedelta(microseconds=1)
FIRST_SEEN_KEY = "schedule:{id}:first_seen"


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """One schedule as ``GET /v1/schedules`` shows it: its settings and its next
    fire time (None when its cron never fires again)."""

    id: str
    queue: str
    cron: str
    timezone: str
    catch_up: bool
    priority: int
    data: dict[str, Any]
    next_fire_time: datetime | None


def fire_job_id(schedule_id: str, fire: datetime) -> str:
    return f"{schedule_id}:{fire.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


def cron_trigger(schedule: ScheduleConfig) -> CronTrigger:
    """The schedule's trigger; :class:`ConfigError` for a bad cron string. The cron
    trigger's module is imported here: a config without schedules never loads it."""
    from apscheduler.triggers.cron import CronTrigger

    fields = schedule.cron.split()
    try:
        if len(fields) != 5:
            raise ValueError(f"expected 5 fields (minute hour day month weekday), "
                             f"got {len(fields)}")
        minute, hour, day, month, weekday = fields
        return CronTrigger(minute=minute, hour=hour, day=day, month=month,
                           day_of_week=crontab_weekdays(weekday),
                           timezone=zoneinfo.ZoneInfo(schedule.timezone))
    except ValueError as exc:
        raise ConfigError(f"bad cron {schedule.cron!r}: {exc}") from None


_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


def crontab_weekdays(field: str) -> str:
    """A crontab weekday field (0 or 7 = Sunday) in APScheduler 3's terms, where
    numbers start at Monday: numbers, ranges and steps become day names
    (``1-5`` -> ``mon,tue,wed,thu,fri``); names and ``*`` are kept."""
    out: list[str] = []
    for part in field.split(","):
        base, _, step = part.partition("/")
        if base != "*" and not base.replace("-", "").isdigit():
            out.append(part)  # names (mon-fri): the same in both
            continue
        if base == "*" and not step:
            out.append("*")
            continue
        low, _, high = ("0-6" if base == "*" else base).partition("-")
        end = int(high) if high else (6 if step else int(low))
        if not 0 <= int(low) <= end <= 7:
            raise ValueError(f"bad weekday {part!r} (0-7, 0 and 7 are Sunday)")
        out += [_WEEKDAYS[n] for n in range(int(low), end + 1, int(step or 1))]
    return ",".join(dict.fromkeys(out))


def fire_times(trigger: CronTrigger, after: datetime, until: datetime, *,
               limit: int = MAX_FIRES_PER_PASS) -> list[datetime]:
    """The fire times in ``(after, until]``, oldest first, in UTC."""
    fires: list[datetime] = []
    fire = trigger.get_next_fire_time(None, after + _TICK)
    while fire is not None and fire <= until and len(fires) < limit:
        fires.append(fire.astimezone(UTC))
        fire = trigger.get_next_fire_time(fire, fire + _TICK)
    return fires


def check_schedules(settings: Settings, db_queues: Collection[str] | None = None) -> None:
    """Every schedule's cron parses and (when ``db_queues`` is given) its queue is in
    the YAML or in the database; :class:`ConfigError` naming the schedule otherwise."""
    yaml_queues = {queue.id for queue in settings.queues}
    for index, schedule in enumerate(settings.schedules):
        where = f"schedules[{index}] ({schedule.id})"
        try:
            cron_trigger(schedule)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        known = schedule.queue in yaml_queues or (db_queues is not None
                                                  and schedule.queue in db_queues)
        if db_queues is not None and not known:
            raise ConfigError(f"{where}: queue {schedule.queue!r} is neither in the config "
                              "nor in the database")


class Schedules:
    """The schedules of one daemon. :meth:`start` once, then :meth:`run_once` on
    every poll (the daemon calls it each ``POLL_SECONDS``; tests call it after moving
    a FakeClock)."""

    def __init__(self, service: Hipq, schedules: Sequence[ScheduleConfig], *,
                 clock: Clock) -> None:
        self.service = service
        self.clock = clock
        self.schedules = list(schedules)
        self._triggers = {s.id: cron_trigger(s) for s in self.schedules}
        self._done_until: dict[str, datetime] = {}
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Record each schedule's first sighting; set where its counting starts."""
        now = self.clock.now()
        for schedule in self.schedules:
            stored = await self.service.store.meta_get_or_set(
                FIRST_SEEN_KEY.format(id=schedule.id), now.isoformat())
            first_seen = datetime.fromisoformat(stored)
            start = max(first_seen, now - CATCH_UP_WINDOW) if schedule.catch_up else now
            self._done_until[schedule.id] = start

    async def run_once(self) -> int:
        """Enqueue every fire due since the last pass; the number of jobs created."""
        created = 0
        async with self._lock:
            now = self.clock.now()
            for schedule in self.schedules:
                created += await self._fire(schedule, now)
        return created

    async def _fire(self, schedule: ScheduleConfig, now: datetime) -> int:
        after = max(self._done_until[schedule.id], now - CATCH_UP_WINDOW)
        fires = fire_times(self._triggers[schedule.id], after, now)
        if not fires:
            return 0
        items = [(fire_job_id(schedule.id, fire),
                  EnqueueRequest(data=schedule.data, priority=schedule.priority, run_after=fire))
                 for fire in fires]
        try:
            outcomes = await self.service.enqueue_many(schedule.queue, items)
        except QueueNotFound:
            log.error("schedule %s: queue %s does not exist; fires skipped", schedule.id,
                      schedule.queue, extra={"action": "schedule_error"})
            outcomes = []
        except HipqError as exc:
            log.warning("schedule %s: enqueue failed, will try again: %s", schedule.id, exc,
                        extra={"action": "schedule_error"})
            return 0
        self._done_until[schedule.id] = fires[-1]
        for outcome in outcomes:
            if outcome.status in (InsertStatus.CONFLICT, InsertStatus.INVALID):
                log.warning("schedule %s: job %s not enqueued: %s", schedule.id, outcome.id,
                            outcome.error, extra={"action": "schedule_error"})
        created = sum(o.status is InsertStatus.CREATED for o in outcomes)
        if created:
            log.info("schedule %s: %d job(s) enqueued", schedule.id, created,
                     extra={"action": "schedule_fire"})
        return created

    def next_fire_time(self, schedule: ScheduleConfig) -> datetime | None:
        fires = fire_times(self._triggers[schedule.id], self.clock.now(),
                           datetime.max.replace(tzinfo=UTC), limit=1)
        return fires[0] if fires else None

    def describe(self) -> list[ScheduleState]:
        return [ScheduleState(id=s.id, queue=s.queue, cron=s.cron, timezone=s.timezone,
                              catch_up=s.catch_up, priority=s.priority, data=s.data,
                              next_fire_time=self.next_fire_time(s)) for s in self.schedules]


async def open_schedules(service: Hipq, settings: Settings, *, clock: Clock) -> Schedules:
    """Check the schedules against the YAML and the database, then start them."""
    check_schedules(settings, {record.id for record in await service.list_queues()})
    schedules = Schedules(service, settings.schedules, clock=clock)
    await schedules.start()
    return schedules

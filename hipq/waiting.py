"""Why a job waits (docs/throttling.md): the verdict on one queued job, from facts the service
reads from the database when asked (``GET /v1/jobs/{queue}/{id}``). Pure: no I/O.

The reasons, checked in this order (the first that applies is the answer):

1. ``paused``: the queue is paused.
2. ``not_due``: its ``run_at`` is in the future (until: ``run_at``).
3. ``backoff``: a partner's pause is in force on its scope: the whole queue, or
   its group (the job's value at ``backoff.field``; a missing value is the group
   ``""``). Until: the pause's end; detail: the pause's reason.
4. ``window``: its time windows (its own, else the queue's) are closed now
   (until: the next opening).
5. ``ordering_key``: another job of its ordering key runs, or is queued before it
   (by ``key_order_at``, then id).
6. ``rate_limit``: the rate budget of the queue (of its group, with
   ``rate_limit.by``) is spent (until: when the oldest launch in the window leaves
   it). Critical jobs are not rate limited.
7. ``quota``: its quota group holds its whole share (critical jobs skip quotas).
8. ``concurrency``: the running weight leaves no room for it: a normal job's
   against the effective concurrency (the adaptive limit, when lower than the
   configured one), a critical job's against ``critical_concurrency``.
9. ``position``: none of the above: it is due, behind N due queued jobs in the
   queue's order (N counted up to :data:`POSITION_CAP`; until: null).

A verdict is the database's view at one moment: what the owner holds only in
memory (launches in flight, counted against a rate limit) is not seen, and a
queue with a plugin throttler is judged as the built-in throttler would judge it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from hipq.jobs import Job
from hipq.pause_scope import group_of
from hipq.spec import QueueSpec
from hipq.store.records import Backoff
from hipq.throttling.quotas import DEFAULT_GROUP, QuotaPlan, field_value
from hipq.throttling.rate import RateBudget
from hipq.throttling.windows import is_open, next_open, windows_of

POSITION_CAP = 10_000  # due jobs counted ahead of a job: more shows as "10000+"

Running = Mapping[tuple[bool, str | None], int]  # weight by (critical, group_key)


class WaitReason(StrEnum):
    PAUSED = "paused"
    NOT_DUE = "not_due"
    BACKOFF = "backoff"
    WINDOW = "window"
    ORDERING_KEY = "ordering_key"
    RATE_LIMIT = "rate_limit"
    QUOTA = "quota"
    CONCURRENCY = "concurrency"
    POSITION = "position"


@dataclass(frozen=True, slots=True, kw_only=True)
class Facts:
    """What the verdict on ``job`` looks at, as read at ``now``.

    Attributes:
        queue: the queue's settings as configured (not adapted).
        paused: whether the queue is paused.
        backoffs: the partners' pauses of the queue, passed ones included.
        effective: the queue's stored adaptive limit (None: the configured one).
        key_ahead: the id of a job of the same ordering key that runs or is queued
            before ``job``, if any.
        recent_launches: the queue's launch times in the rate window, by rate group.
        running: the weight of the queue's running jobs by (critical, group_key).
        ahead: due queued jobs before ``job`` in queue order, up to POSITION_CAP + 1.
    """

    job: Job
    queue: QueueSpec
    now: datetime
    paused: bool = False
    backoffs: Sequence[Backoff] = ()
    effective: float | None = None
    key_ahead: str | None = None
    recent_launches: Mapping[str, Sequence[datetime]] = field(default_factory=dict)
    running: Running = field(default_factory=dict)
    ahead: int = 0


@dataclass(frozen=True, slots=True)
class Waiting:
    reason: WaitReason
    detail: str
    until: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {"reason": str(self.reason), "detail": self.detail,
                "until": None if self.until is None else _iso(self.until)}


def verdict(facts: Facts) -> Waiting:
    """Why ``facts.job`` (queued) waits: the first reason that applies."""
    for check in _CHECKS:
        found = check(facts)
        if found is not None:
            return found
    return _position(facts)


def effective_concurrency(queue: QueueSpec, effective: float | None) -> int | None:
    """The concurrency in force: the adaptive limit in whole units (never under
    ``adaptive.min`` nor over ``concurrency``), else the configured one (as
    :meth:`hipq.engine.partner_word.PartnerWord.effective`)."""
    concurrency = queue.concurrency
    if queue.adaptive is None or concurrency is None or effective is None:
        return concurrency
    return max(queue.adaptive.min, min(concurrency, math.floor(effective + 1e-9)))


# -- the checks, in order ------------------------------------------------------------


def _paused(facts: Facts) -> Waiting | None:
    return Waiting(WaitReason.PAUSED, "queue paused") if facts.paused else None


def _not_due(facts: Facts) -> Waiting | None:
    run_at = facts.job.run_at
    if run_at <= facts.now:
        return None
    return Waiting(WaitReason.NOT_DUE, f"due at {_iso(run_at)}", run_at)


def _backoff(facts: Facts) -> Waiting | None:
    job, now = facts.job, facts.now
    pauses = {b.group: b for b in facts.backoffs if b.queue == job.queue and b.until > now}
    pause = pauses.get(None)
    backoff = facts.queue.backoff
    if pause is None and backoff.scope == "group" and backoff.field is not None:
        pause = pauses.get(group_of(field_value(job.data, backoff.field) or ""))
    return None if pause is None else Waiting(WaitReason.BACKOFF, pause.reason, pause.until)


def _window(facts: Facts) -> Waiting | None:
    windows, tz = windows_of(facts.job, facts.queue)
    if not windows or is_open(windows, tz, facts.now):
        return None
    opening = next_open(windows, tz, facts.now)
    if opening is None:
        return Waiting(WaitReason.WINDOW, "window never opens")
    local = opening.astimezone(ZoneInfo(tz))
    shape = "%H:%M" if opening - facts.now < timedelta(days=1) else "%Y-%m-%d %H:%M"
    shown = local.strftime(shape)
    return Waiting(WaitReason.WINDOW, f"window closed until {shown} {tz}", opening)


def _ordering_key(facts: Facts) -> Waiting | None:
    key, ahead = facts.job.ordering_key, facts.key_ahead
    if key is None or ahead is None:
        return None
    return Waiting(WaitReason.ORDERING_KEY, f"behind job {ahead} of key {key}")


def _rate_limit(facts: Facts) -> Waiting | None:
    rate, job = facts.queue.rate_limit, facts.job
    if rate is None or job.critical:
        return None
    budget = RateBudget.of(rate, facts.recent_launches, facts.now)
    group = budget.group(job)
    if budget.remaining.get(group, budget.launches) > 0:
        return None
    window = timedelta(seconds=rate.per_seconds)
    times = sorted(t for t in facts.recent_launches.get(group, ()) if t > facts.now - window)
    until = times[len(times) - rate.launches] + window  # the launch whose leaving frees one
    detail = f"rate limit {rate.launches} per {rate.per_seconds:g}s reached"
    return Waiting(WaitReason.RATE_LIMIT, detail + (f" for {group}" if group else ""), until)


def _quota(facts: Facts) -> Waiting | None:
    quotas, job = facts.queue.quotas, facts.job
    capacity = effective_concurrency(facts.queue, facts.effective)
    if quotas is None or capacity is None or job.critical:
        return None
    normal = {group: weight for (critical, group), weight in facts.running.items()
              if not critical}
    plan = QuotaPlan.of_values(quotas, capacity, normal)
    group = plan.group(job)
    if plan.fits(group, job.weight):
        return None
    if quotas.lend_unused and sum(normal.values()) + job.weight <= capacity:
        return None  # it may borrow capacity idle now
    name = "of the default group" if group == DEFAULT_GROUP else group
    return Waiting(WaitReason.QUOTA,
                   f"quota {name} at {plan.used.get(group, 0)} of {plan.caps.get(group, 0)}")


def _concurrency(facts: Facts) -> Waiting | None:
    job, queue = facts.job, facts.queue
    used = sum(w for (critical, _), w in facts.running.items() if critical == job.critical)
    capacity = (queue.critical_concurrency if job.critical
                else effective_concurrency(queue, facts.effective))
    if capacity is None or used + job.weight <= capacity:
        return None
    detail = f"running {used} of {capacity}"
    if job.critical:
        detail += " (critical)"
    elif queue.concurrency is not None and capacity < queue.concurrency:
        detail += f" (adaptive; configured {queue.concurrency})"
    return Waiting(WaitReason.CONCURRENCY, detail)


def _position(facts: Facts) -> Waiting:
    ahead = facts.ahead
    if ahead == 0:
        return Waiting(WaitReason.POSITION, "due, next in line")
    count = f"{POSITION_CAP}+" if ahead > POSITION_CAP else str(ahead)
    return Waiting(WaitReason.POSITION, f"due, behind {count} job{'' if ahead == 1 else 's'}")


_CHECKS: tuple[Callable[[Facts], Waiting | None], ...] = (
    _paused, _not_due, _backoff, _window, _ordering_key, _rate_limit, _quota, _concurrency)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")

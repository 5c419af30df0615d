"""The queue's throttler: the built-in one, composed of the parts in
:mod:`hipq.throttling`, or a plugin named in the queue's settings.

For each candidate, in the queue's order (effective priorities with aging):

1. outside its time windows -> rescheduled to the next opening, not launched;
2. its ordering key has a running (or just chosen) job -> waits;
3. critical -> its own pool (``critical_concurrency``), skipping quotas and rate
   limits of normal jobs;
4. normal jobs are taken strictly in order against the queue's capacity: the first
   that does not fit stops normal launches for this tick (a heavy job is never
   starved by lighter ones behind it); a job over its group's quota blocks only its
   group; a rate-limited job waits without blocking others.

With ``quotas.lend_unused`` a second pass lets over-quota groups use the capacity
still idle after the first pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from hipq.config import QueueConfig
from hipq.jobs import Job
from hipq.plugins import ThrottleContext, Throttler, ThrottleResult, instantiate
from hipq.throttling import (
    CapacityPool,
    OrderingKeys,
    QuotaPlan,
    RateBudget,
    in_queue_order,
    is_open,
    next_open,
    windows_of,
)
from hipq.values import plugin_time, text_problem


class _Tick:
    """The mutable state of one selection."""

    def __init__(self, ctx: ThrottleContext) -> None:
        queue, usage = ctx.queue, ctx.running_usage()  # sums: O(1) in the running jobs
        self.normal = CapacityPool(queue.concurrency, usage.normal_weight)
        self.critical = CapacityPool(queue.critical_concurrency, usage.critical_weight)
        self.quotas = (QuotaPlan.of_values(queue.quotas, queue.concurrency, usage.field_weights)
                       if queue.quotas is not None and queue.concurrency is not None else None)
        self.rate = (RateBudget.of(queue.rate_limit, ctx.recent_launches, ctx.now)
                     if queue.rate_limit is not None else None)
        self.keys = OrderingKeys(usage.ordering_keys)
        self.launch: list[Job] = []
        self.held: dict[str, str] = {}  # job id -> why it waits (docs/throttling.md)
        self.normal_blocked = False
        self.blocked_groups: set[str] = set()
        self.over_quota: list[Job] = []

    def take(self, job: Job) -> None:
        self.launch.append(job)
        self.keys.take(job)
        if self.quotas is not None and not job.critical:
            self.quotas.add(self.quotas.group(job), job.weight)

    def offer_normal(self, job: Job) -> None:
        held = self.held
        if self.normal_blocked:
            held[job.id] = "concurrency"
            return
        group = self.quotas.group(job) if self.quotas is not None else ""
        if group in self.blocked_groups:
            self.over_quota.append(job)
            held[job.id] = "quota"
            return
        if not self.normal.fits(job.weight):
            self.normal_blocked = True
            held[job.id] = "concurrency"
            return
        if self.quotas is not None and not self.quotas.fits(group, job.weight):
            self.blocked_groups.add(group)
            self.over_quota.append(job)
            held[job.id] = "quota"
            return
        if self.rate is not None and not self.rate.take(job):
            held[job.id] = "rate_limit"
            return
        self.normal.take(job.weight)
        self.take(job)

    def lend(self) -> None:
        """Second pass: over-quota jobs may use capacity nobody else could."""
        for job in self.over_quota:
            if not self.keys.free(job):
                continue
            if not self.normal.fits(job.weight):
                return
            if self.rate is not None and not self.rate.take(job):
                self.held[job.id] = "rate_limit"
                continue
            self.normal.take(job.weight)
            self.held.pop(job.id, None)
            self.take(job)


class BuiltinThrottler:
    def __init__(self, **options: object) -> None:
        if options:
            raise TypeError(f"the built-in throttler takes no options, got {sorted(options)}")

    def select(self, ctx: ThrottleContext) -> ThrottleResult:
        queue = ctx.queue
        tick = _Tick(ctx)
        reschedule = {}
        for job in in_queue_order(ctx.candidates, queue.ordering, ctx.now, queue.aging_seconds):
            windows, tz = windows_of(job, queue)
            if windows and not is_open(windows, tz, ctx.now):
                opening = next_open(windows, tz, ctx.now)
                if opening is not None:
                    reschedule[job.id] = opening
                tick.held[job.id] = "window"
                continue
            if not tick.keys.free(job):
                tick.held[job.id] = "ordering_key"
                continue
            if job.critical:
                if tick.critical.take(job.weight):
                    tick.take(job)
                else:
                    tick.held[job.id] = "concurrency"
                continue
            tick.offer_normal(job)
        if tick.quotas is not None and tick.quotas.lend_unused:
            tick.lend()
        return ThrottleResult(launch=tick.launch, reschedule=reschedule, held=tick.held)


class _Wrapped:
    """Adapts a plugin's ``select`` callable to the :class:`Throttler` protocol."""

    def __init__(self, fn: object) -> None:
        self._fn = fn

    def select(self, ctx: ThrottleContext) -> ThrottleResult:
        result = self._fn(ctx)  # type: ignore[operator]
        if not isinstance(result, ThrottleResult):
            raise TypeError(f"throttler returned {type(result).__name__}, not ThrottleResult")
        return checked_decision(result)


def checked_decision(decision: ThrottleResult) -> ThrottleResult:
    """A throttler plugin's decision in the shapes the engine and the stores take
    (its times in UTC; a naive time is taken as UTC), else ``TypeError`` saying what
    is wrong: an error in a plugin (nothing of its queue launches that tick: docs/configuration.md,
    "Plugins"), which must not reach the store, where it would fail every tick for every queue."""
    launch: list[Any] = [None]
    with contextlib.suppress(TypeError):  # not iterable
        launch = list(decision.launch)
    if not all(isinstance(j, Job) for j in launch):
        raise TypeError("throttler decision: launch is not a sequence of the candidates")
    reschedule: dict[str, datetime] = {}
    for job_id, at in _mapping(decision.reschedule, "reschedule").items():
        when = plugin_time(at)
        if when is None:
            raise TypeError(f"throttler decision: reschedule of {job_id!r} to {at!r:.100}, "
                            "not a time")
        reschedule[job_id] = when
    for name, reasons in (("drop", decision.drop), ("held", decision.held)):
        for job_id, reason in _mapping(reasons, name).items():
            if not isinstance(reason, str) or text_problem(reason):
                raise TypeError(f"throttler decision: {name} reason of {job_id!r} is not "
                                f"plain text ({reason!r:.100})")
    return replace(decision, launch=launch, reschedule=reschedule)


def _mapping(value: object, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"throttler decision: {name} is not a mapping of job ids")
    return value


def build_throttler(queue: QueueConfig) -> Throttler:
    """The throttler a queue's settings name (a plugin is loaded and instantiated:
    ``ConfigError`` if it cannot be)."""
    if queue.throttler is None:
        return BuiltinThrottler()
    return _Wrapped(instantiate(queue.throttler.plugin, queue.throttler.options, "select"))

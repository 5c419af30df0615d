"""Example throttler plugins.

``throttler: {plugin: "hipq.contrib.throttlers:MaxPerTick", options: {limit: 10}}``
"""

from __future__ import annotations

from hipq.jobs import Job
from hipq.plugins import ThrottleContext, ThrottleResult
from hipq.throttling import CapacityPool


class MaxPerTick:
    """The queue's weighted concurrency, and at most ``limit`` launches per tick
    (a simple way to ramp up slowly against a fragile downstream)."""

    def __init__(self, limit: int = 10) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit

    def select(self, ctx: ThrottleContext) -> ThrottleResult:
        pool = CapacityPool.of(ctx.queue.concurrency, ctx.running)
        launch: list[Job] = []
        for job in ctx.candidates:
            if len(launch) >= self.limit or not pool.take(job.weight):
                break
            launch.append(job)
        return ThrottleResult(launch=launch)


def highest_priority_only(ctx: ThrottleContext) -> ThrottleResult:
    """A function plugin: launch only the candidates with the best priority number
    present (respecting concurrency), leaving the rest for later ticks."""
    if not ctx.candidates:
        return ThrottleResult()
    best = min(job.priority for job in ctx.candidates)
    pool = CapacityPool.of(ctx.queue.concurrency, ctx.running)
    return ThrottleResult(launch=[j for j in ctx.candidates
                                  if j.priority == best and pool.take(j.weight)])

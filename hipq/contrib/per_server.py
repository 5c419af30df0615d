"""An example throttler: at most ``limit`` running jobs per server.

    throttler: {plugin: "hipq.contrib.per_server:PerServer", options: {limit: 2, field: server}}

It composes the built-in parts from ``hipq.plugins``: the queue's weighted
capacity (``CapacityPool``), one running job per ordering key (``OrderingKeys``),
time windows (``is_open``/``next_open``) and a per-server cap built from
``field_value``. Jobs without the field share one "unknown server" bucket.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from hipq.jobs import Job
from hipq.plugins import (
    CapacityPool,
    OrderingKeys,
    ThrottleContext,
    ThrottleResult,
    field_value,
    is_open,
    next_open,
    windows_of,
)

UNKNOWN = "<unknown>"


class PerServer:
    def __init__(self, limit: int = 1, field: str = "server") -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self.field = field

    def server(self, job: Job) -> str:
        return field_value(job.data, self.field) or UNKNOWN

    def select(self, ctx: ThrottleContext) -> ThrottleResult:
        pool = CapacityPool.of(ctx.queue.concurrency, ctx.running)
        keys = OrderingKeys.of(ctx.running)
        per_server = Counter(self.server(job) for job in ctx.running)
        launch: list[Job] = []
        reschedule: dict[str, datetime] = {}
        for job in ctx.candidates:
            windows, tz = windows_of(job, ctx.queue)  # the job's own windows, else the queue's
            if windows and not is_open(windows, tz, ctx.now):
                opening = next_open(windows, tz, ctx.now)
                if opening is not None:
                    reschedule[job.id] = opening
                continue
            server = self.server(job)
            if per_server[server] >= self.limit or not keys.free(job):
                continue
            if not pool.take(job.weight):
                break
            per_server[server] += 1
            keys.take(job)
            launch.append(job)
        return ThrottleResult(launch=launch, reschedule=reschedule)

"""A throttler plugin: ``throttler: {plugin: "plugins.example_throttlers:SlowStart",
options: {step: 5}}``.

Ramps a queue up gently against a fragile partner: the weight in flight grows by
at most ``step`` units per tick, up to the queue's concurrency. A queue at rest
starts with ``step`` units, then ``step`` more each tick while they keep running.
Jobs are taken in queue order; the first that does not fit ends the tick's
selection (as the built-in throttler keeps queue order).
"""

from __future__ import annotations

from hipq.plugins import CapacityPool, Job, ThrottleContext, ThrottleResult


class SlowStart:
    def __init__(self, step: int = 5) -> None:
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            raise ValueError("step must be an integer of at least 1")
        self.step = step

    def select(self, ctx: ThrottleContext) -> ThrottleResult:
        usage = ctx.running_usage()
        used = usage.normal_weight + usage.critical_weight
        limit = used + self.step
        if ctx.queue.concurrency is not None:
            limit = min(limit, ctx.queue.concurrency)
        pool = CapacityPool(capacity=limit, used=used)
        launch: list[Job] = []
        for job in ctx.candidates:
            if not pool.take(job.weight):
                break
            launch.append(job)
        return ThrottleResult(launch=launch)

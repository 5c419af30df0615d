"""The built-in throttler: weighted concurrency, critical jobs, queue order.

Candidates arrive in the queue's order (``time_then_priority`` or
``priority_then_time``, done by the fetch). Normal jobs are taken strictly in that
order: the first one that does not fit stops normal launches for this tick, so a
heavy job is never starved by lighter ones behind it. Critical jobs have their own
pool (``critical_concurrency``) and skip the normal pool entirely, so they cannot
starve and cannot be starved.
"""

from __future__ import annotations

from hipq.config import QueueConfig
from hipq.plugins import ThrottleContext, Throttler, ThrottleResult, instantiate
from hipq.throttling.capacity import CapacityPool


class BuiltinThrottler:
    def __init__(self, **options: object) -> None:
        if options:
            raise TypeError(f"the built-in throttler takes no options, got {sorted(options)}")

    def select(self, ctx: ThrottleContext) -> ThrottleResult:
        queue = ctx.queue
        normal = CapacityPool.of(queue.concurrency, (j for j in ctx.running if not j.critical))
        critical = CapacityPool.of(queue.effective_critical_concurrency,
                                   (j for j in ctx.running if j.critical))
        launch = []
        normal_blocked = False
        for job in ctx.candidates:
            if job.critical:
                if critical.take(job.weight):
                    launch.append(job)
            elif not normal_blocked:
                if normal.take(job.weight):
                    launch.append(job)
                else:
                    normal_blocked = True
        return ThrottleResult(launch=launch)


class _Wrapped:
    """Adapts a plugin's ``select`` callable to the :class:`Throttler` protocol."""

    def __init__(self, fn: object) -> None:
        self._fn = fn

    def select(self, ctx: ThrottleContext) -> ThrottleResult:
        result = self._fn(ctx)  # type: ignore[operator]
        if not isinstance(result, ThrottleResult):
            raise TypeError(f"throttler returned {type(result).__name__}, not ThrottleResult")
        return result


def build_throttler(queue: QueueConfig) -> Throttler:
    if queue.throttler is None:
        return BuiltinThrottler()
    return _Wrapped(instantiate(queue.throttler.plugin, queue.throttler.options, "select"))

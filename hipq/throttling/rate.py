"""Rate limits: at most ``launches`` launches in any ``per_seconds`` sliding window,
per queue or per group (``by: <field path in data>``).

The launch history lives in the database (``launch_events``), so limits survive
restarts and hold across daemons; the throttler gets the launches of the current
window in ``ThrottleContext.recent_launches`` (group -> launch times).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hipq.jobs import Job
from hipq.pause_scope import group_of
from hipq.spec import RateLimitSpec
from hipq.throttling.quotas import field_value

ALL = ""  # the group of a queue-wide limit


@dataclass(slots=True)
class RateBudget:
    launches: int
    per_seconds: float
    by: str | None
    remaining: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, rate_limit: RateLimitSpec, recent: Mapping[str, Sequence[datetime]],
           now: datetime) -> RateBudget:
        budget = cls(launches=rate_limit.launches, per_seconds=rate_limit.per_seconds,
                     by=rate_limit.by)
        since = now - timedelta(seconds=budget.per_seconds)
        for group, times in recent.items():
            used = sum(1 for at in times if at > since)
            budget.remaining[group] = max(budget.launches - used, 0)
        return budget

    def group(self, job: Job) -> str:
        """The job's rate group: its value at ``by`` (bounded as a pause's group is,
        :func:`hipq.pause_scope.group_of`: stored per launch and read every tick)."""
        if self.by is None:
            return ALL
        return group_of(field_value(job.data, self.by) or ALL)

    def take(self, job: Job) -> bool:
        group = self.group(job)
        left = self.remaining.get(group, self.launches)
        if left <= 0:
            return False
        self.remaining[group] = left - 1
        return True

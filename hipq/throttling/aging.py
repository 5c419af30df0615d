"""Aging: every ``aging_seconds`` of waiting (counted from ``run_at``) lowers a job's
effective priority number by one, so low-priority jobs are not starved forever."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter

from hipq.jobs import Job, Ordering


def effective_priority(job: Job, now: datetime, aging_seconds: float | None) -> int:
    if not aging_seconds:
        return job.priority
    waited = max((now - job.run_at).total_seconds(), 0.0)
    return job.priority - math.floor(waited / aging_seconds)


_PLAIN_ORDER = {Ordering.PRIORITY_THEN_TIME: attrgetter("priority", "run_at", "id"),
                Ordering.TIME_THEN_PRIORITY: attrgetter("run_at", "priority", "id")}


def in_queue_order(jobs: Sequence[Job], ordering: Ordering, now: datetime,
                   aging_seconds: float | None) -> list[Job]:
    """Candidates sorted in the queue's order, using effective priorities."""
    if not aging_seconds:  # effective priority = priority: plain fields, compared in C
        return sorted(jobs, key=_PLAIN_ORDER[ordering])
    if ordering is Ordering.PRIORITY_THEN_TIME:
        return sorted(jobs, key=lambda j: (effective_priority(j, now, aging_seconds),
                                           j.run_at, j.id))
    return sorted(jobs, key=lambda j: (j.run_at, effective_priority(j, now, aging_seconds), j.id))

"""Quotas: each group of a queue gets at most floor(share x concurrency) units.

``quotas: {field: "region", shares: {east: 0.4, north: 0.3, west: 0.3}, default: 0.1,
lend_unused: false}``. ``field`` is a dotted path into a job's ``data``; a job whose
value is missing or not listed belongs to the default group, whose cap is
``floor(default x concurrency)`` if ``default`` is given, else what the listed
shares leave. With ``lend_unused`` a group may borrow capacity that is idle after
every group has taken what it could within its own cap; it gives it back as its
own jobs finish (running jobs are never pre-empted).
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hipq.jobs import Job
from hipq.paths import field_text
from hipq.spec import QuotaSpec

DEFAULT_GROUP = "__default__"


def field_value(data: Mapping[str, Any], path: str) -> str | None:
    """The scalar at a dotted path in a job's data, as text (None if absent):
    :func:`hipq.paths.field_text`."""
    return field_text(data, path)


def group_of(data: Mapping[str, Any], path: str, listed: Container[str]) -> str:
    """The quota group of a job's data (the default group if missing/unlisted)."""
    value = field_value(data, path)
    return value if value is not None and value in listed else DEFAULT_GROUP


@dataclass(slots=True)
class QuotaPlan:
    """Caps and current use per group, in weight units."""

    field_path: str
    caps: dict[str, int]
    used: dict[str, int] = field(default_factory=dict)
    lend_unused: bool = False

    @classmethod
    def of(cls, quotas: QuotaSpec, concurrency: int, running: Iterable[Job]) -> QuotaPlan:
        plan = cls.empty(quotas, concurrency)
        for job in running:
            plan.add(plan.group(job), job.weight)
        return plan

    @classmethod
    def of_values(cls, quotas: QuotaSpec, concurrency: int,
                  weights: Mapping[str | None, int]) -> QuotaPlan:
        """From the weight of running normal jobs per value of ``quotas.field``."""
        plan = cls.empty(quotas, concurrency)
        for value, weight in weights.items():
            plan.add(value if value is not None and value in plan.caps else DEFAULT_GROUP,
                     weight)
        return plan

    @classmethod
    def empty(cls, quotas: QuotaSpec, concurrency: int) -> QuotaPlan:
        caps = {group: math.floor(share * concurrency) for group, share in quotas.shares.items()}
        default = quotas.default
        caps[DEFAULT_GROUP] = (math.floor(default * concurrency) if default is not None
                               else max(concurrency - sum(caps.values()), 0))
        return cls(field_path=quotas.field, caps=caps, lend_unused=quotas.lend_unused)

    def group(self, job: Job) -> str:
        return group_of(job.data, self.field_path, self.caps)

    def add(self, group: str, weight: int) -> None:
        self.used[group] = self.used.get(group, 0) + weight

    def fits(self, group: str, weight: int) -> bool:
        return self.used.get(group, 0) + weight <= self.caps.get(group, 0)

    def free(self, group: str) -> int:
        return max(self.caps.get(group, 0) - self.used.get(group, 0), 0)

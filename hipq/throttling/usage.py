"""What a queue's running jobs hold, summed: weight per pool, the ordering keys
in use, and the weight of normal jobs per value of the quota field.

The engine keeps these counts current as jobs start and end, so a throttler
decides in O(candidates) however many jobs run; :meth:`RunningUsage.of` sums
them from a list of running jobs (a plugin, a test, or a queue whose counts the
engine does not keep).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field

from hipq.jobs import Job
from hipq.throttling.quotas import field_value


@dataclass(frozen=True, slots=True)
class RunningUsage:
    """Attributes:
        normal_weight: weight units held by running normal (non-critical) jobs.
        critical_weight: weight units held by running critical jobs.
        ordering_keys: the ordering keys that have a running job.
        field_path: the quota field the next mapping is by (``None``: not kept).
        field_weights: weight of running normal jobs per value of the quota field
            (``None`` where a job's data has no scalar there).
    """

    normal_weight: int = 0
    critical_weight: int = 0
    ordering_keys: Set[str] = frozenset()
    field_path: str | None = None
    field_weights: Mapping[str | None, int] = field(default_factory=dict)

    @classmethod
    def of(cls, running: Iterable[Job], field_path: str | None = None) -> RunningUsage:
        normal = critical = 0
        keys: set[str] = set()
        weights: dict[str | None, int] = {}
        for job in running:
            if job.ordering_key is not None:
                keys.add(job.ordering_key)
            if job.critical:
                critical += job.weight
                continue
            normal += job.weight
            if field_path is not None:
                value = field_value(job.data, field_path)
                weights[value] = weights.get(value, 0) + job.weight
        return cls(normal_weight=normal, critical_weight=critical, ordering_keys=keys,
                   field_path=field_path, field_weights=weights)

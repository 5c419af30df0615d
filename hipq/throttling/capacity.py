"""Concurrency in weight units: a weight-2 job counts as two."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hipq.jobs import Job


@dataclass(slots=True)
class CapacityPool:
    """A budget of weight units; ``capacity=None`` is unlimited."""

    capacity: int | None
    used: int = 0

    @classmethod
    def of(cls, capacity: int | None, running: Iterable[Job]) -> CapacityPool:
        return cls(capacity=capacity, used=sum(job.weight for job in running))

    @property
    def free(self) -> int | None:
        return None if self.capacity is None else max(self.capacity - self.used, 0)

    def fits(self, weight: int) -> bool:
        return self.capacity is None or self.used + weight <= self.capacity

    def take(self, weight: int) -> bool:
        """Reserve ``weight`` units if they fit; say whether they did."""
        if not self.fits(weight):
            return False
        self.used += weight
        return True

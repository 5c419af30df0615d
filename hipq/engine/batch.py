"""The current batch: this daemon's in-memory view of the running jobs of the
queues it holds, and the tick's counters.

The database is authoritative; the batch is a cache changed only after the
database said so. One :class:`Entry` per running job, keyed by (queue, id); an
entry whose ``outcome`` is set has ended in memory and waits for step 3 to persist
it; ``extended`` says a heartbeat moved its deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hipq.frozen import quick_init
from hipq.jobs import Job, JobError, JobState


@quick_init
@dataclass(frozen=True, slots=True)
class Outcome:
    """How a try ended, as known in memory before it is persisted."""

    status: JobState  # SUCCEEDED, FAILED or CANCELLED
    result: Any = None
    error: JobError | None = None
    response: Any = None


@dataclass(slots=True)
class Entry:
    job: Job
    deadline: datetime | None
    outcome: Outcome | None = None
    inbox_ids: list[int] = field(default_factory=list)
    extended: bool = False


Batch = dict[tuple[str, str], Entry]


@dataclass(frozen=True, slots=True)
class ReconcileResult:
    """What one tick did (every field a count)."""

    fetched: int = 0
    launched: int = 0
    rescheduled: int = 0
    dropped: int = 0
    expired: int = 0
    retried: int = 0
    finished: int = 0
    timed_out: int = 0
    responses_applied: int = 0
    adopted: int = 0
    throttler_errors: int = 0

    @property
    def changed(self) -> bool:
        return any(getattr(self, name) for name in self.__dataclass_fields__)


@dataclass(slots=True)
class Counters:
    values: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, n: int = 1) -> None:
        if n:
            self.values[name] = self.values.get(name, 0) + n

    def result(self) -> ReconcileResult:
        return ReconcileResult(**self.values)

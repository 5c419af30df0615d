"""What a tick did: :class:`ReconcileResult` (counts, and for metrics and failure
logs the launched jobs and persisted ends, by reference), built by the tick's
:class:`Counters`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from hipq.jobs import Job
from hipq.store.records import Change, InboxOutcome


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
    throttled: int = 0  # tries the partner throttled (docs/throttling.md)
    ran_inline: int = 0  # tries claimed and ended in one statement (hipq.engine.inline)
    # tries run within the tick whose archive is written while the next tick runs
    # (hipq.engine.executor): counted in finished and ran_inline by that tick
    archiving: int = 0
    # for metrics (hipq.metrics) and failure logs, by reference: no per-job work here
    launched_jobs: Sequence[Job] = ()
    ended: Sequence[Change] = ()
    expired_by_queue: Mapping[str, int] = field(default_factory=dict)
    responses_by_outcome: Mapping[str, int] = field(default_factory=dict)
    wake_at: datetime | None = None  # a partner's pause ends then: a tick is due

    @property
    def changed(self) -> bool:
        return any(getattr(self, name) for name in self.__dataclass_fields__
                   if name != "wake_at")


@dataclass(slots=True)
class Counters:
    values: dict[str, int] = field(default_factory=dict)
    launched_jobs: Sequence[Job] = ()
    ended: Sequence[Change] = ()
    expired_by_queue: dict[str, int] = field(default_factory=dict)
    responses_by_outcome: dict[str, int] = field(default_factory=dict)
    wake_at: datetime | None = None

    def add(self, name: str, n: int = 1) -> None:
        if n:
            self.values[name] = self.values.get(name, 0) + n

    def expired(self, queue: str, n: int) -> None:
        self.add("expired", n)
        if n:
            self.expired_by_queue[queue] = self.expired_by_queue.get(queue, 0) + n

    def ran(self, done: Sequence[Change]) -> None:
        """Tries run within their tick whose archive applied (hipq.engine.inline)."""
        if done:
            self.add("finished", len(done))
            self.add("ran_inline", len(done))
            self.ended = [*self.ended, *done]

    def responses(self, marks: Sequence[tuple[int, InboxOutcome]]) -> None:
        for _, outcome in marks:
            self.responses_by_outcome[outcome] = self.responses_by_outcome.get(outcome, 0) + 1

    def result(self) -> ReconcileResult:
        return ReconcileResult(**self.values, launched_jobs=self.launched_jobs,
                               ended=self.ended, expired_by_queue=self.expired_by_queue,
                               responses_by_outcome=self.responses_by_outcome,
                               wake_at=self.wake_at)

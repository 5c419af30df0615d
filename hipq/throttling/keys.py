"""Ordering keys: at most one running job per ``ordering_key``.

The fetch already offers only the head of each key (the earliest by enqueue-time
``run_at`` among its queued and running jobs; see the store), so launches of a key
happen in order; this part keeps a tick from launching two jobs of one key.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from hipq.jobs import Job


@dataclass(slots=True)
class OrderingKeys:
    """``running``: the keys with a running job (read, never changed: it may be
    the engine's own live set); ``taken``: the keys chosen in this selection."""

    running: AbstractSet[str] = frozenset()
    taken: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, running: Iterable[Job]) -> OrderingKeys:
        return cls(running={j.ordering_key for j in running if j.ordering_key is not None})

    def free(self, job: Job) -> bool:
        key = job.ordering_key
        return key is None or (key not in self.running and key not in self.taken)

    def take(self, job: Job) -> None:
        if job.ordering_key is not None:
            self.taken.add(job.ordering_key)

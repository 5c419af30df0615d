"""In-tick archives written while the next tick runs (:mod:`.inline`; PostgreSQL,
under a backlog). A tick that ran a full page of tries starts their archive
statements and returns; the next tick calls the functions of its own page while
those statements are written, then collects them (their counts are that tick's)
before it starts its own. So a page's functions run while the last page is
archived, where a tick used to wait for its archive first.

A queue has at most one archive in flight, and none outlives the tick after the
one that started it (:meth:`ArchivesInFlight.collect_older`). Until it commits,
its jobs still read as queued: every read of the queue's due jobs leaves them out
(:meth:`ArchivesInFlight.ids`). An archive that fails applied nothing: its jobs are
queued as they were, and run again (as after a crash in the same place)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hipq.engine.result import Counters
from hipq.errors import HipqError
from hipq.spec import QueueSpec
from hipq.store import Change, Store
from hipq.store.driver import JobKey
from hipq.store.rows import chunks

log = logging.getLogger(__name__)

IN_TICK_ARCHIVE_CHUNK = 1000  # tries ended within a tick per statement (several at once)


async def archive_ran(store: Store, spec: QueueSpec, ends: Sequence[Change], *, owner: str,
                      now: datetime) -> set[JobKey]:
    """Claim and archive tries that ended within their tick, in a few statements
    side by side (each on its own connection: the database ends them on all its
    cores); the ones that applied."""
    applied: set[JobKey] = set()
    for part in await asyncio.gather(*(
            store.job_archive_ran_many(queue=spec.id, changes=chunk, owner=owner, now=now,
                                       heartbeat_seconds=spec.heartbeat_timeout_seconds)
            for chunk in chunks(ends, IN_TICK_ARCHIVE_CHUNK))):
        applied |= part
    return applied


def count_ran(counters: Counters, done: Sequence[Change]) -> None:
    """Tries run within their tick whose archive applied."""
    counters.add("finished", len(done))
    counters.add("ran_inline", len(done))
    counters.ended = [*counters.ended, *done]


@dataclass(slots=True)
class _Flight:
    writes: asyncio.Future[set[JobKey]]
    ends: Sequence[Change]
    ids: frozenset[str]
    tick: int  # the tick that started it


class ArchivesInFlight:
    """The archive in flight of each queue (see the module docstring)."""

    def __init__(self) -> None:
        self._flights: dict[str, _Flight] = {}
        self.tick = 0  # the reconciler's tick count, set at the start of each tick

    def start(self, queue: str, writes: Coroutine[Any, Any, set[JobKey]],
              ends: Sequence[Change]) -> None:
        """Write ``ends`` (``writes``, the statements that archive them) in the
        background. The queue's earlier archive must have been collected."""
        assert queue not in self._flights, queue
        future = asyncio.ensure_future(writes)
        future.add_done_callback(_quiet)
        self._flights[queue] = _Flight(writes=future, ends=ends,
                                       ids=frozenset(c.id for c in ends), tick=self.tick)

    def ids(self, queue: str) -> frozenset[str]:
        """The jobs of the queue whose archive is being written (none: empty)."""
        flight = self._flights.get(queue)
        return frozenset() if flight is None else flight.ids

    async def collect(self, queue: str) -> list[Change]:
        """Wait for the queue's archive in flight, if any; the ends that applied."""
        flight = self._flights.pop(queue, None)
        if flight is None:
            return []
        try:
            applied = await flight.writes
        except HipqError as exc:
            log.warning("the archive of %d tries of queue %s run within their tick failed "
                        "(%s); their jobs are still queued and run again", len(flight.ends),
                        queue, exc, extra={"action": "tick_error", "queue": queue})
            return []
        return [c for c in flight.ends if (c.queue, c.id) in applied]

    async def collect_older(self) -> dict[str, list[Change]]:
        """Collect every archive started before the current tick."""
        older = [q for q, f in self._flights.items() if f.tick < self.tick]
        return {queue: await self.collect(queue) for queue in older}

    async def wait(self) -> None:
        """Until every archive in flight is written (each stays to be collected)."""
        for flight in list(self._flights.values()):
            with contextlib.suppress(Exception):
                await asyncio.shield(flight.writes)

    def __len__(self) -> int:
        return len(self._flights)


def _quiet(future: asyncio.Future[Any]) -> None:
    """An archive's error is retrieved when it is collected; this keeps one nobody
    collects (the event loop closing) from being reported as never retrieved."""
    if not future.cancelled():
        future.exception()

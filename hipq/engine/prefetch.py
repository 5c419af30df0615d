"""Pages read ahead for in-tick runs (:mod:`.inline`): while a tick's archive
statements run, the queue's next candidates are read (PostgreSQL, where a read
waits on no write), so that the next tick's fetch overlaps this one's last
statements. The read may still see the jobs that tick ran as queued: they are left
out when the page is taken.

Where the tick read one plain page (no quota group, no aging read; critical reads
beside it are fine), the next page is read from the job after the last one that ran
(:func:`read_after`): the jobs that ran are not read and decoded again, only their
ids, to check that no other queued job comes before that last one (a job enqueued
ahead meanwhile, one held back). If one does, the page is read from the start."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hipq.engine.decide import Fetch, unique_jobs
from hipq.jobs import Job
from hipq.spec import QueueSpec
from hipq.store import Store

KEEP_SECONDS = 1.0  # a page read ahead is taken within this, else read again


def in_order(candidates: Mapping[str, Job], ids: Iterable[str]) -> list[Job]:
    """The candidates of ``ids``, in the order read."""
    wanted = set(ids)
    return [job for i, job in candidates.items() if i in wanted]


async def read_after(store: Store, spec: QueueSpec, plan: Sequence[Fetch], now: datetime,
                     ran: Sequence[Job]) -> list[Job] | None:
    """The reads of ``plan``, its plain read from the job after the last of ``ran``
    (the jobs that ran of the last page, in the order read); None (read from the
    start) where the plan has another shape, or a queued job that did not run comes
    up to that last one."""
    first, rest = plan[0] if plan else None, plan[1:]
    if (first is None or first.critical_only or first.group is not None
            or first.default_group_excluding is not None
            or not all(f.critical_only for f in rest)):
        return None
    page = store.job_fetch_due_after(
        queue=spec.id, now=now, limit=first.limit, ordering=first.ordering or spec.ordering,
        after=ran[-1], ran={j.id for j in ran}, key_mode=spec.ordering_key_mode)
    critical = [store.job_fetch_due(  # the jobs that ran are among them: read past them
        queue=spec.id, now=now, limit=f.limit + len(ran), ordering=spec.ordering,
        critical_only=True, key_mode=spec.ordering_key_mode) for f in rest]
    reads = await asyncio.gather(page, *critical, return_exceptions=True)
    for read in reads:
        if isinstance(read, BaseException):
            raise read
    if reads[0] is None:
        return None
    return unique_jobs(r for r in reads if isinstance(r, list))


@dataclass(slots=True)
class _Page:
    at: datetime
    reads: asyncio.Future[list[Job]]
    exclude: frozenset[str]


class PagesAhead:
    """At most one page read ahead per queue, taken by the queue's next fetch."""

    def __init__(self) -> None:
        self._pages: dict[str, _Page] = {}

    def start(self, queue: str, now: datetime, read: Coroutine[Any, Any, list[Job]],
              ran: Sequence[str]) -> None:
        """Read the queue's next page now (``read``); ``ran``: the jobs the tick ran,
        left out of it."""
        reads = asyncio.ensure_future(read)
        reads.add_done_callback(_quiet)
        self._pages[queue] = _Page(at=now, reads=reads, exclude=frozenset(ran))

    async def take(self, queue: str, now: datetime, *, widen: bool) -> list[Job] | None:
        """The page read ahead if it is as good as a read now: at most
        ``KEEP_SECONDS`` old, not for a widened fetch, and with jobs to run (so the
        ticks go on following each other, and the next one reads afresh what was
        enqueued meanwhile). Else None (the page is dropped)."""
        page = self._pages.pop(queue, None)
        if page is None:
            return None
        try:
            jobs = await page.reads
        except Exception:  # a failed read: the caller reads again, now
            return None
        kept = [j for j in jobs if j.id not in page.exclude]
        if widen or not kept or (now - page.at).total_seconds() > KEEP_SECONDS:
            return None
        return kept

    async def wait(self) -> None:
        """Until every read under way has ended (its page stays to be taken)."""
        for page in list(self._pages.values()):
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await page.reads

    def cancel(self) -> None:
        for page in self._pages.values():
            page.reads.cancel()
        self._pages.clear()

    def __len__(self) -> int:
        return len(self._pages)


def _quiet(future: asyncio.Future[Any]) -> None:
    """A page nobody takes (the daemon stops, the queue is handed over) may have
    failed: its error is retrieved here, not reported as never retrieved."""
    if not future.cancelled():
        future.exception()

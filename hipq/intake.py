"""Ingesting the intake (docs/from-your-database.md).

Producers insert rows into ``job_intake`` in their own transactions
(``hipq_enqueue()`` on PostgreSQL, :mod:`hipq.sql` on either database). At the
start of each tick the daemon takes the pending rows of the queues it owns,
oldest first, and enqueues them through :meth:`hipq.service.Hipq.enqueue_many`:
every rule of ``PUT /v1/jobs/{queue}/{id}`` (id and data checks, windows,
merging, correlation keys, idempotency). Then, in one transaction, the ingested
rows are deleted and the rejected ones keep their error (an invalid id or data,
an unknown field, a conflict with a job of the same id and another body).

Crash safety without a shared transaction: the jobs are inserted first, the rows
deleted after. A daemon killed between the two leaves rows whose jobs exist; the
next ingest (by whoever owns the queue then) enqueues them again, and an enqueue
of the same id with the same body is an idempotent repeat: nothing new. So every
row ends as exactly one job or one rejected row, whatever dies when. A row without
an id gets ``intake-<row id>``, the same at every attempt.

Rows of queues that do not exist are rejected by any daemon once they are
:data:`ORPHAN_GRACE` old (a queue created in the same deploy has time to appear).

Bounded reads (docs/from-your-database.md, "Limits"): the store measures each row in
SQL before it reads it, and one read holds at most :data:`READ_BYTES` of rows' data
and fields (and one row more); a row over ``max_bytes`` (``api.max_body_bytes``)
comes without its values, and a row the store cannot read (a time out of range, JSON
text that is not one value) with why: each such row is rejected on its own, and the
others are ingested. A read cut short by bytes counts as a full batch (more may
wait), as one cut by :data:`INGEST_BATCH` does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from hipq.bodies import EnqueueRequest
from hipq.clock import Clock
from hipq.errors import HipqError, QueueNotFound
from hipq.intake_rows import requests_of
from hipq.service import Hipq
from hipq.store import InsertOutcome, InsertStatus, Store
from hipq.store.records import INTAKE_MAX_BYTES, INTAKE_READ_BYTES, IntakeRow

log = logging.getLogger(__name__)

INGEST_BATCH = 5000  # rows per tick and queue set; a full batch asks for another tick
READ_BYTES = INTAKE_READ_BYTES  # bytes of data and fields one read holds (and one row)
BATCHES_PER_CALL = 4  # batches one tick ingests (the next read while one is enqueued)
CHUNK = 1000  # rows per enqueue_many call
IN_FLIGHT = 2  # enqueue_many calls at once
ORPHAN_GRACE = timedelta(seconds=10)
ORPHAN_EVERY = timedelta(seconds=1)


class Intake:
    def __init__(self, service: Hipq, store: Store, clock: Clock, *,
                 max_bytes: int = INTAKE_MAX_BYTES) -> None:
        self.service = service
        self.store = store
        self.clock = clock
        self.max_bytes = max_bytes  # a row's data and fields, at most (api.max_body_bytes)
        self.ingested = 0
        self.rejected: dict[str, int] = {}  # by queue, since start (metrics read the DB)
        self._orphans_at: datetime | None = None
        self.last_id = 0  # the largest row id seen (SQLite's watcher compares it)
        # the next batch, read while the last one of a full call was enqueued: the
        # next call starts on it (no read between two ticks of a burst)
        self._ahead: tuple[tuple[str, ...], asyncio.Future[list[IntakeRow]]] | None = None

    async def ingest(self, owned: Collection[str], known: Collection[str]) -> bool:
        """Ingest pending rows of the ``owned`` queues (and reject old rows of queues
        not in ``known``); True when a full batch was taken (more may wait)."""
        now = self.clock.now()
        await self._orphans(known, now)
        if not owned:
            self.close()
            return False
        queues = tuple(sorted(owned))
        return await self._burst(queues, await self._first(queues), now)

    async def _burst(self, queues: tuple[str, ...], rows: list[IntakeRow],
                     now: datetime) -> bool:
        """Up to :data:`BATCHES_PER_CALL` batches from ``rows`` on, each read while
        the one before is enqueued; True when the last one was full (the batch after
        it is read ahead for the next call)."""
        done: asyncio.Future[None] | None = None
        following: asyncio.Future[list[IntakeRow]] | None = None
        try:
            for batch in range(BATCHES_PER_CALL):
                if not rows:
                    return False
                self.last_id = max(self.last_id, rows[-1].id)
                following = None  # the next batch is read while this one is enqueued
                if self._full(rows):
                    following = asyncio.ensure_future(self._read(queues, after=rows[-1].id))
                ingested, rejected = await self._batch(rows)
                if done is not None:
                    await done
                # this batch's rows go while the next one is enqueued (after its jobs)
                done = asyncio.ensure_future(self._done(rows, ingested, rejected, now))
                if following is None:
                    return False
                if batch + 1 == BATCHES_PER_CALL:  # the next call (tick) starts on it
                    self._ahead, following = (queues, following), None
                    return True
                rows = await following
            return False
        except BaseException:
            if following is not None:
                _drop(following)
            raise
        finally:
            if done is not None:
                await done

    async def _first(self, queues: tuple[str, ...]) -> list[IntakeRow]:
        """The first batch of a call: the one read ahead by the last call when it was
        for the same queues, else read now. A read ahead starts after the last row
        read, so a burst goes on in id order; a row that commits late with a smaller
        id is read once the burst ends (a call that finds less than a full batch
        makes the next one start from the beginning)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            for_queues, future = ahead
            if for_queues == queues:
                try:
                    return await future
                except HipqError as exc:
                    log.warning("intake: read ahead failed: %s", exc,
                                extra={"action": "intake_error"})
            else:
                _drop(future)
        return await self._read(queues)

    async def _read(self, queues: tuple[str, ...], after: int = 0) -> list[IntakeRow]:
        """A batch of pending rows, bounded in rows and in bytes."""
        return await self.store.intake_pending(queues=list(queues), limit=INGEST_BATCH,
                                               after=after, max_bytes=self.max_bytes,
                                               budget=READ_BYTES)

    def _full(self, rows: list[IntakeRow]) -> bool:
        """Whether a read stopped at its bound (rows or bytes): more may wait."""
        if len(rows) >= INGEST_BATCH:
            return True
        return sum(r.size for r in rows if r.size <= self.max_bytes) >= READ_BYTES

    def close(self) -> None:
        """Drop a read ahead (the daemon stops)."""
        if self._ahead is not None:
            _drop(self._ahead[1])
            self._ahead = None

    async def _batch(self, rows: list[IntakeRow]) -> tuple[list[int], dict[int, str]]:
        by_queue: dict[str, list[IntakeRow]] = {}
        for row in rows:
            by_queue.setdefault(row.queue, []).append(row)
        ingested: list[int] = []
        rejected: dict[int, str] = {}
        for queue, queued in by_queue.items():
            try:
                await self._queue(queue, queued, ingested, rejected)
            except QueueNotFound:
                continue  # deleted meanwhile: the orphan sweep rejects its rows
        return ingested, rejected

    async def _done(self, rows: list[IntakeRow], ingested: list[int],
                    rejected: dict[int, str], now: datetime) -> None:
        await self.store.intake_done(ingested=ingested, rejected=rejected, now=now)
        self.ingested += len(ingested)
        if rejected:
            queue_of = {r.id: r.queue for r in rows}
            for row_id in rejected:
                queue = queue_of[row_id]
                self.rejected[queue] = self.rejected.get(queue, 0) + 1
            log.warning("intake: %d rows rejected (GET /v1/intake?status=rejected)",
                        len(rejected), extra={"action": "intake_rejected"})

    async def _queue(self, queue: str, rows: list[IntakeRow], ingested: list[int],
                     rejected: dict[int, str]) -> None:
        items: list[tuple[str, EnqueueRequest]] = []
        sent: list[IntakeRow] = []
        for row, (problem, item) in zip(rows, requests_of(rows), strict=True):
            if item is None:
                rejected[row.id] = problem or "invalid"
                continue
            items.append(item)
            sent.append(row)
        if not items:
            return
        outcomes = await self._enqueue(queue, items)
        for row, outcome in zip(sent, outcomes, strict=True):
            if outcome.status in (InsertStatus.CREATED, InsertStatus.EXISTS):
                ingested.append(row.id)
            else:
                rejected[row.id] = f"{outcome.status}: {outcome.error or ''}".rstrip(": ")

    async def _enqueue(self, queue: str,
                       items: list[tuple[str, EnqueueRequest]]) -> list[InsertOutcome]:
        """``enqueue_many`` in chunks, :data:`IN_FLIGHT` at a time (the daemon builds
        one chunk while the database writes another), when the order of the rows
        cannot matter: no id twice, no ordering key (a merging queue merges in order);
        else in one call, in order."""
        chunks = [items[i:i + CHUNK] for i in range(0, len(items), CHUNK)]
        if (len(chunks) == 1 or len({job_id for job_id, _ in items}) < len(items)
                or any(request.ordering_key is not None for _, request in items)):
            return await self.service.enqueue_many(queue, items)
        slots = asyncio.Semaphore(IN_FLIGHT)

        async def one(chunk: list[tuple[str, EnqueueRequest]]) -> list[InsertOutcome]:
            async with slots:
                return await self.service.enqueue_many(queue, chunk)

        done = await asyncio.gather(*(one(c) for c in chunks))
        return [outcome for chunk in done for outcome in chunk]

    async def _orphans(self, known: Collection[str], now: datetime) -> None:
        if self._orphans_at is not None and now - self._orphans_at < ORPHAN_EVERY:
            return
        self._orphans_at = now
        try:
            rows = await self.store.intake_orphans(known=sorted(known), before=now - ORPHAN_GRACE,
                                                   limit=INGEST_BATCH)
        except HipqError as exc:
            log.warning("intake: orphan sweep failed: %s", exc, extra={"action": "intake_error"})
            return
        if rows:
            await self.store.intake_done(
                ingested=[], rejected={r.id: f"unknown queue {r.queue!r}" for r in rows}, now=now)
            for row in rows:
                self.rejected[row.queue] = self.rejected.get(row.queue, 0) + 1


def _drop(future: asyncio.Future[Any]) -> None:
    """Cancel a read nobody will use (its failure, if it failed, is not news)."""
    if future.done():
        if not future.cancelled():
            future.exception()
    else:
        future.cancel()

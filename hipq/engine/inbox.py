"""Applying responses from the inbox to the current batch, and the sweep of the
responses nothing in the batch claims.

State model. Every response is written to ``response_inbox`` before it is
acknowledged (HTTP 202, Kafka offset commit); the row is *pending* until it is
marked with its outcome: ``applied`` (by step 3, in the same transaction as the
job's change), ``stale`` (another attempt), ``duplicate`` (the try had ended in
memory already), ``late`` (the try had ended in the database: recorded on the
job's history) or ``unmatched`` (no job had the key within
``responses.buffer_seconds``).

Who is authoritative: the owner of a job's queue applies its responses; the sweep
leaves a response alone while a live job (queued, or running elsewhere) holds
its key, so a response that arrives before its try is marked running is kept.

Failure modes: a crash between applying in memory and step 3 leaves the rows
pending; the next tick (or the next owner) applies them again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from hipq.engine.batch import Batch, Counters, Entry
from hipq.engine.decide import extended_deadline, inbox_verdict, outcome_from_row
from hipq.jobs import ResponseStatus
from hipq.store import InboxOutcome, InboxRow, Store

log = logging.getLogger(__name__)

SWEEP_LIMIT = 500  # pending rows classified per sweep
SWEEP_GRACE = timedelta(seconds=1)  # a response this young may still find its try


class Inbox:
    def __init__(self, store: Store, *, buffer_seconds: float,
                 heartbeat_seconds: Callable[[str], float | None]) -> None:
        self.store = store
        self.buffer = timedelta(seconds=buffer_seconds)
        self.heartbeat_seconds = heartbeat_seconds  # queue -> its heartbeat timeout
        self._sweep_after = 0

    async def apply(self, batch: Batch, now: datetime, counters: Counters) -> None:
        """Step 0: apply the pending responses of the batch's tries."""
        by_key = {e.job.correlation_key: e for e in batch.values() if e.job.correlation_key}
        rows = await self.store.inbox_pending_for_keys(list(by_key))
        marks: list[tuple[int, InboxOutcome]] = []
        late: list[tuple[str, str, InboxRow]] = []
        for row in rows:
            entry = by_key[row.correlation_key]
            if row.id in entry.inbox_ids:
                continue  # applied in memory already; a failed persist left it pending
            verdict = inbox_verdict(entry, row)
            if verdict is None:
                self._apply(entry, row, now)
                counters.add("responses_applied")
                continue
            marks.append((row.id, verdict))
            if verdict is InboxOutcome.LATE:
                late.append((entry.job.queue, entry.job.id, row))
        if late:
            await self.store.attempt_record_late_many(late, now=now)
        if marks:
            await self.store.inbox_mark_many(marks, now=now)

    def _apply(self, entry: Entry, row: InboxRow, now: datetime) -> None:
        entry.inbox_ids.append(row.id)
        if row.status == ResponseStatus.RUNNING:
            entry.deadline = extended_deadline(
                entry, row, self.heartbeat_seconds(entry.job.queue), now)
            entry.extended = True
        else:
            entry.outcome = outcome_from_row(row)

    async def sweep(self, batch: Batch, now: datetime) -> None:
        """Classify pending responses that match nothing in the batch (one bounded
        page per call, walking the pending rows by id)."""
        rows = await self.store.inbox_pending_scan(after_id=self._sweep_after,
                                                   before=now - SWEEP_GRACE, limit=SWEEP_LIMIT)
        self._sweep_after = rows[-1].id if len(rows) == SWEEP_LIMIT else 0
        if not rows:
            return
        in_batch = {e.job.correlation_key for e in batch.values()}
        rows = [r for r in rows if r.correlation_key not in in_batch]
        if not rows:
            return
        keys = list({r.correlation_key for r in rows})
        live = await self.store.job_keys_lookup(keys)
        past = await self.store.archived_by_attempt_keys([k for k in keys if k not in live])
        late: list[tuple[str, str, InboxRow]] = []
        marks: list[tuple[int, InboxOutcome]] = []
        expiry = now - self.buffer
        for row in rows:
            if row.correlation_key in live:
                continue  # the job is queued or owned elsewhere: keep it for its owner
            if row.correlation_key in past:
                queue, job_id = past[row.correlation_key]
                late.append((queue, job_id, row))
                marks.append((row.id, InboxOutcome.LATE))
            elif row.received_at < expiry:
                marks.append((row.id, InboxOutcome.UNMATCHED))
                log.warning("unmatched response for correlation key %s", row.correlation_key,
                            extra={"action": "response_unmatched"})
        await self.store.attempt_record_late_many(late, now=now)
        await self.store.inbox_mark_many(marks, now=now)

"""Applying responses from the inbox to the current batch, and the sweep of the
responses nothing in the batch claims.

State model. Every response is written to ``response_inbox`` before it is
acknowledged (HTTP 202, Kafka offset commit); the row is *pending* until it is
marked with its outcome: ``applied`` (by step 3, in the same transaction as the
job's change), ``stale`` (another attempt), ``duplicate`` (the try had ended in
memory already), ``late`` (the try had ended in the database: recorded on the
job's history, at most :data:`~hipq.store.history.LATE_PER_TRY` per try; the
others are only marked) or ``unmatched`` (no job had the key within
``responses.buffer_seconds``).

Rows this process wrote are handed to the inbox once committed (:meth:`Inbox.wrote`)
and applied from memory: reading them back would give the same rows. Rows other
writers made are read (an id cursor), when told they arrived (NOTIFY) and once a
second; the cursor passes the handed-over rows at that read. A tick reads a bounded
part of them (rows, and their JSON text): a backlog of large responses is read over
several ticks, run back to back (:attr:`Inbox.backlog`).

Who is authoritative: the owner of a job's queue applies its responses; the sweep
leaves a response alone while a live job (queued, or running elsewhere) holds
its key, so a response that arrives before its try is marked running is kept.

Failure modes: a crash between applying in memory and step 3 leaves the rows
pending; the next tick (or the next owner) applies them again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from operator import attrgetter

from hipq.engine.batch import Batch
from hipq.engine.decide import extended_deadline, inbox_verdict, outcome_from_row
from hipq.engine.held import HeldTry
from hipq.engine.requests import Call, Plan, Together, call
from hipq.engine.result import Counters
from hipq.jobs import ResponseStatus
from hipq.store.records import InboxOutcome, InboxRow

log = logging.getLogger(__name__)

SWEEP_LIMIT = 500  # pending rows classified per sweep
SWEEP_GRACE = timedelta(seconds=1)  # a response this young may still find its try
NEW_ROWS_PAGE = 2000  # new pending rows read per page in step 0
NEW_PAGES_PER_TICK = 5  # pages step 0 reads at most; the rest waits for the next tick
# result and error JSON text (characters) a page of step 0, or a sweep, reads at most
# (past its first row): a backlog of large responses, after a restart or a handover,
# is read over several ticks, not held at once
PAGE_CHARS = 16 * 2**20
LOOKBACK_IDS = 256  # ids below the cursor read again (rows committed out of id order)
_FAR = timedelta(days=3650)
READ_EVERY = timedelta(seconds=1)  # with events: new rows read at least this often
_ID = attrgetter("id")


class Inbox:
    """Step 0's responses, in O(responses): the rows written since the last tick
    (an id cursor over pending rows, whoever wrote them) and the pending rows of
    fixed keys that just entered the batch (a response may come before its try is
    marked running) are matched to entries through the batch's key index. The
    sweep, once a second, is the safety net: it walks every pending row, applies
    those the cursor missed, and classifies the rest. Its reads and writes are plans
    (:mod:`hipq.engine.requests`)."""

    def __init__(self, *, buffer_seconds: float,
                 heartbeat_seconds: Callable[[str], float | None]) -> None:
        self.buffer = timedelta(seconds=buffer_seconds)
        self.heartbeat_seconds = heartbeat_seconds  # queue -> its heartbeat timeout
        self._sweep_after = 0
        self._cursor = 0
        self._fresh: set[str] = set()
        # with events on, new rows are read only after ``arrived()`` (responses
        # written by this process, a NOTIFY from another daemon) or once a second
        self._events = False
        self._arrived = True
        self._read_at: datetime | None = None
        # rows this process wrote, committed, not applied yet; the highest id handed over
        self._written: list[InboxRow] = []
        self._written_max = 0
        # step 0 left new rows unread (its bound per tick): the next tick is due at once,
        # and reads on after the last row read (not from below the cursor again: rows
        # left pending there, another daemon's, could take a tick's whole bound)
        self.backlog = False
        self._resume = 0

    def use_events(self) -> None:
        """Read new inbox rows only when told some arrived (and once a second)."""
        self._events = True

    def arrived(self) -> None:
        """Responses were written (here, or by another daemon that said so)."""
        self._arrived = True

    def wrote(self, rows: Sequence[InboxRow]) -> None:
        """These rows were written by this process and committed: the next step 0
        applies them without reading them (issue 28)."""
        if rows:
            self._written.extend(rows)
            self._written_max = max(self._written_max, *map(_ID, rows))

    def watch(self, entry: HeldTry) -> None:
        """An entry joined the batch; a response for a fixed key may be waiting."""
        if entry.fixed_key:
            assert entry.correlation_key is not None
            self._fresh.add(entry.correlation_key)

    def apply(self, batch: Batch, now: datetime, counters: Counters) -> Plan[None]:
        """Step 0: apply the responses that arrived for the batch's tries. The new
        rows and the rows of fresh keys are read together (side by side: under load
        each read in turn is a wait on the tick's way)."""
        reads: list[Plan[list[InboxRow]] | Call] = []
        if (not self._events or self._arrived or self._read_at is None
                or now - self._read_at >= READ_EVERY):
            self._arrived = False
            self._read_at = now
            reads.append(self._new_rows(now, passed=self._written_max))
        fresh = list(self._fresh)
        if fresh:
            reads.append(call("inbox_pending_for_keys", fresh))
        written, self._written = self._written, []
        rows: list[InboxRow] = []
        try:
            if reads:
                for part in (yield Together(tuple(reads))):
                    rows.extend(part)
        except BaseException:
            self._written[:0] = written  # applied by the next try
            raise
        self._fresh.difference_update(fresh)  # read (a failed read reads them again)
        if written:  # in id order with what was read (a heartbeat before its end)
            rows = sorted([*written, *rows], key=_ID) if rows else written
        yield from self._apply_rows(batch, rows, now, counters)

    def _new_rows(self, now: datetime, *, passed: int = 0) -> Plan[list[InboxRow]]:
        """The pending rows past the cursor, at most :data:`NEW_PAGES_PER_TICK` pages
        (each bounded in rows and in :data:`PAGE_CHARS`); then the cursor passes them
        and ``passed`` (the rows handed over before this read: their ids were taken
        when they committed, so the read sees what committed below them, as for rows
        read). When rows are left, the next tick reads on after the last row read,
        and :attr:`backlog` says it is due at once."""
        rows: list[InboxRow] = []
        after = self._resume if self.backlog else max(self._cursor - LOOKBACK_IDS, 0)
        for _ in range(NEW_PAGES_PER_TICK):
            page = yield call("inbox_pending_scan", after_id=after, before=now + _FAR,
                              limit=NEW_ROWS_PAGE, max_chars=PAGE_CHARS)
            rows.extend(page.rows)
            if not page.more:
                self.backlog = False
                self._cursor = max(self._cursor, rows[-1].id if rows else 0, passed)
                return rows
            after = page.rows[-1].id
        self.backlog, self._resume = True, after
        self._arrived = True  # (with events) the next tick reads on
        self._cursor = max(self._cursor, after)
        return rows

    def _apply_rows(self, batch: Batch, rows: list[InboxRow], now: datetime,
                    counters: Counters) -> Plan[list[InboxRow]]:
        """Apply the rows that match an entry; mark the stale, late and duplicate
        ones; return the rows no entry claims."""
        marks: list[tuple[int, InboxOutcome]] = []
        late: list[tuple[str, str, InboxRow]] = []
        unclaimed: list[InboxRow] = []
        seen: set[int] = set()
        for row in rows:
            entry = batch.by_key(row.correlation_key)
            if entry is None:
                unclaimed.append(row)
                continue
            if row.id in seen or row.id in entry.inbox_ids:
                continue  # read twice, or applied in memory and not persisted yet
            seen.add(row.id)
            verdict = inbox_verdict(entry, row)
            if verdict is None:
                self._apply(batch, entry, row, now)
                counters.add("responses_applied")
                continue
            marks.append((row.id, verdict))
            if verdict is InboxOutcome.LATE:
                late.append((entry.queue, entry.id, row))
        if late:
            yield call("attempt_record_late_many", late, now=now)
        if marks:
            counters.responses(marks)
            yield call("inbox_mark_many", marks, now=now)
        return unclaimed

    def _apply(self, batch: Batch, entry: HeldTry, row: InboxRow, now: datetime) -> None:
        if row.status == ResponseStatus.RUNNING:
            batch.extend(entry, extended_deadline(
                entry, row, self.heartbeat_seconds(entry.queue), now), row.id)
        else:
            entry.inbox_ids += (row.id,)
            batch.end(entry, outcome_from_row(row))

    def sweep(self, batch: Batch, now: datetime, counters: Counters) -> Plan[None]:
        """Walk the pending rows (one bounded page per call): apply those an entry
        claims, and classify the rest (late, or unmatched after the buffer time)."""
        page = yield call("inbox_pending_scan", after_id=self._sweep_after,
                          before=now - SWEEP_GRACE, limit=SWEEP_LIMIT, max_chars=PAGE_CHARS)
        rows = page.rows
        self._sweep_after = rows[-1].id if page.more else 0
        if not rows:
            return
        rows = yield from self._apply_rows(batch, rows, now, counters)
        if not rows:
            return
        keys = list({r.correlation_key for r in rows})
        live = yield call("job_keys_lookup", keys)
        past = yield call("archived_by_attempt_keys", [k for k in keys if k not in live])
        late: list[tuple[str, str, InboxRow]] = []
        marks: list[tuple[int, InboxOutcome]] = []
        unmatched: list[str] = []
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
                unmatched.append(row.correlation_key)
        if unmatched:  # one line per sweep, however many (a flood must not flood the log)
            log.warning("%d unmatched response(s), e.g. correlation key %.100r",
                        len(unmatched), unmatched[0], extra={"action": "response_unmatched",
                                                             "count": len(unmatched)})
        yield call("attempt_record_late_many", late, now=now)
        counters.responses(marks)
        yield call("inbox_mark_many", marks, now=now)

"""The memory store's response inbox and job histories: responses written once per
``dedup_key``, read by key or by id after a cursor (bounded by rows and by the
characters of their values), marked once; the tries of each job with its late
responses, at most :data:`~hipq.store.history.LATE_PER_TRY` a try. A base of
:class:`~hipq.store.memory.MemoryStore`; see :mod:`hipq.store.memory_tables`.

A value's size is the length of its JSON text (``json.dumps``, characters not
escaped to ASCII); a missing value (None) has none, as a NULL column has none.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from hipq.jobs import Attempt
from hipq.store.history import LATE, late_values, try_of, within_late_bound
from hipq.store.listing import VALUES
from hipq.store.memory_tables import InboxEntry, MemoryBase, copied
from hipq.store.records import (
    InboxOutcome,
    InboxPage,
    InboxRow,
    JobHistory,
    ListedResponse,
    Response,
)
from hipq.store.rows import NO_BOUND


def json_chars(value: Any) -> int:
    """The length of a stored value's JSON text; 0 for None (no value)."""
    return 0 if value is None else len(json.dumps(value, ensure_ascii=False))


def _listed(entry: InboxEntry, value_chars: int) -> ListedResponse:
    """An unmatched response as a listing shows it: a value whose JSON text is longer
    than ``value_chars`` as the first ``value_chars`` characters of that text."""
    values: dict[str, Any] = {}
    cut: list[str] = []
    for name in VALUES:
        value = getattr(entry, name)
        text = None if value is None else json.dumps(value, ensure_ascii=False)
        if text is not None and len(text) > value_chars:
            values[name] = text[:value_chars]
            cut.append(name)
        else:
            values[name] = copied(value)
    return ListedResponse(id=entry.id, correlation_key=entry.correlation_key,
                          attempt=entry.attempt, status=entry.status, source=entry.source,
                          received_at=entry.received_at, recorded_at=entry.applied_at,
                          result=values["result"], error=values["error"], truncated=tuple(cut))


class MemoryInbox(MemoryBase):
    """The response inbox, late responses and job histories."""

    # -- the inbox -------------------------------------------------------------------------

    async def inbox_insert_many(self, responses: Sequence[Response], *,
                                now: datetime) -> list[int | None]:
        t = self._t
        ids: list[int | None] = []
        for r in responses:
            if r.dedup_key is not None and r.dedup_key in t.dedup:
                ids.append(None)
                continue
            entry = InboxEntry(
                id=next(t.inbox_ids), correlation_key=r.correlation_key, attempt=r.attempt,
                status=r.status, retryable=r.retryable, result=copied(r.result),
                error=copied(r.error), extend_seconds=r.extend_seconds, source=r.source,
                dedup_key=r.dedup_key, received_at=now, token=r.token)
            t.inbox[entry.id] = t.pending[entry.id] = entry
            t.pending_by_key.setdefault(entry.correlation_key, {})[entry.id] = entry
            if r.dedup_key is not None:
                t.dedup[r.dedup_key] = entry.id
            ids.append(entry.id)
        return ids

    async def inbox_pending_for_keys(self, keys: Sequence[str]) -> list[InboxRow]:
        by_key = self._t.pending_by_key
        found = [entry for key in set(keys) for entry in by_key.get(key, {}).values()]
        return [entry.row() for entry in sorted(found, key=lambda e: e.id)]

    async def inbox_pending_scan(self, *, after_id: int, before: datetime, limit: int,
                                 max_chars: int | None = None) -> InboxPage:
        page: list[InboxEntry] = []
        for entry in self._t.pending.values():  # by id
            if len(page) >= limit:
                break
            if entry.id > after_id and entry.received_at < before:
                page.append(entry)
        bound = NO_BOUND if max_chars is None else max_chars
        rows: list[InboxRow] = []
        chars = 0  # of the rows before the next one
        for entry in page:
            if chars >= bound:
                break
            rows.append(entry.row())
            chars += json_chars(entry.result) + json_chars(entry.error)
        if not rows:
            return InboxPage([], False)
        return InboxPage(rows, more=len(page) >= limit or len(rows) < len(page))

    async def inbox_mark_many(self, marks: Sequence[tuple[int, InboxOutcome]], *,
                              now: datetime) -> None:
        self._t.mark(marks, now)

    async def inbox_list_unmatched(self, *, limit: int = 100,
                                   after: tuple[datetime, int] | None = None,
                                   value_chars: int = 4096) -> list[ListedResponse]:
        unmatched = [e for e in self._t.inbox.values()
                     if e.outcome == InboxOutcome.UNMATCHED.value
                     and (after is None or (e.received_at, e.id) < after)]
        unmatched.sort(key=lambda e: (e.received_at, e.id), reverse=True)
        return [_listed(e, value_chars) for e in unmatched[:limit]]

    async def inbox_counts(self) -> dict[str, int]:
        return dict(Counter(e.outcome or "pending" for e in self._t.inbox.values()))

    # -- histories and late responses ------------------------------------------------------

    async def job_attempts(self, queue: str, job_id: str) -> list[Attempt]:
        return [row.entry() for row in self._t.history(queue, job_id)]

    async def job_history(self, queue: str, job_id: str, *, limit: int) -> JobHistory:
        rows = self._t.history(queue, job_id)
        last = rows[-limit:] if limit > 0 else []
        return JobHistory(tries=[row.entry(response=False) for row in last], total=len(rows))

    async def archived_by_attempt_keys(self, keys: Sequence[str]) -> dict[str, tuple[str, str]]:
        found = {key: rows[-1] for key in keys if (rows := self._t.tries_by_key.get(key))}
        return {key: (row.queue, row.job_id) for key, row in found.items()}

    async def attempt_record_late_many(self, rows: Sequence[tuple[str, str, InboxRow]], *,
                                       now: datetime) -> None:
        t = self._t
        latest = {key: max(r.attempt for r in t.tries_by_key[key])
                  for key in {r.correlation_key for _, _, r in rows} if key in t.tries_by_key}
        values = late_values(rows, latest, now)
        recorded: Counter[tuple[str, str, int]] = Counter()
        for queue, job_id, attempt in {try_of(v) for v in values}:
            recorded[(queue, job_id, attempt)] = sum(
                1 for r in t.tries.get((queue, job_id), ())
                if r.attempt == attempt and r.outcome == LATE)
        for v in within_late_bound(values, recorded):
            t.record_try(v["queue"], v["job_id"], attempt=v["attempt"],
                         key=v["correlation_key"], launched_at=None, finished_at=now,
                         outcome=LATE, error=v["error"], response=v["response"])

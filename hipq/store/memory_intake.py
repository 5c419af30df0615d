"""The memory store's intake (enqueue from SQL, docs/from-your-database.md): pending rows
by id, rejected rows kept with their error. No producer's transaction can write
here, so :meth:`MemoryIntake.intake_add` stands for one that commits (what
``hipq_enqueue()`` or :mod:`hipq.sql` write: the data and fields as JSON text). A
base of :class:`~hipq.store.memory.MemoryStore`; see :mod:`hipq.store.memory_tables`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from hipq.sql import ENQUEUE_FIELDS
from hipq.store.memory_tables import MemoryBase
from hipq.store.records import (
    FUTURE_REJECTION,
    INTAKE_ID_CHARS,
    INTAKE_LIMIT_KEY,
    INTAKE_MAX_BYTES,
    INTAKE_OTHER,
    INTAKE_OTHER_NAMES,
    INTAKE_QUEUE_CHARS,
    INTAKE_READ_BYTES,
    INTAKE_VALUE_CHARS,
    IntakeRow,
    too_big,
)

_NOT_FIELDS = ("id", "data", "run_after")  # the row's own columns


def _iso(value: Any) -> str:
    """A datetime among the fields (``expires_at``), as :mod:`hipq.sql` writes it."""
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# JSON text as hipq.sql writes it
_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"),
                           default=_iso).encode


class MemoryIntake(MemoryBase):
    """The intake's reads and writes, and a producer's rows."""

    def intake_add(self, queue: str, jobs: Iterable[Mapping[str, Any]], *,
                   now: datetime) -> list[int]:
        """Write rows as a producer's committed transaction would, enqueued at ``now``:
        one per job ``{"id": ..., "data": ..., "run_after": ..., <fields>}`` (as for
        :func:`hipq.sql.enqueue_many`, where ``id`` may be None). Returns their ids.

        Raises:
            TypeError: a field that is not an enqueue field.
        """
        rows = []
        for job in jobs:
            fields = {k: v for k, v in job.items() if k not in _NOT_FIELDS}
            unknown = sorted(set(fields) - ENQUEUE_FIELDS)
            if unknown:
                raise TypeError(f"unknown enqueue field(s) {unknown}")
            data, text = _ENCODE(job.get("data") or {}), _ENCODE(fields)
            rows.append(IntakeRow(id=0, queue=queue, job_id=job.get("id"), data=data,
                                  run_after=job.get("run_after"), fields=text,
                                  enqueued_at=now,
                                  size=len(data.encode()) + len(text.encode())))
        for row in rows:  # every row or none
            row.id = next(self._t.intake_ids)
            self._t.intake[row.id] = row
        return [row.id for row in rows]

    def _rows(self, *, pending: bool) -> list[IntakeRow]:
        return [r for r in self._t.intake.values() if (r.error is None) is pending]

    async def intake_pending(self, *, queues: Sequence[str], limit: int, after: int = 0,
                             max_bytes: int = INTAKE_MAX_BYTES,
                             budget: int = INTAKE_READ_BYTES) -> list[IntakeRow]:
        wanted = set(queues)
        found = [r for r in self._rows(pending=True) if r.queue in wanted and r.id > after]
        rows, total = [], 0
        for row in found[:limit]:
            if total >= budget:
                break
            rows.append(_read(row, max_bytes))
            total += row.size if row.size <= max_bytes else 0
        return rows

    async def intake_orphans(self, *, known: Sequence[str], before: datetime,
                             limit: int) -> list[IntakeRow]:
        known_set = set(known)
        found = [r for r in self._rows(pending=True) if r.queue not in known_set
                 and r.enqueued_at is not None and r.enqueued_at < before]
        return [replace(r, queue=r.queue[:INTAKE_QUEUE_CHARS], job_id=_id(r), data=None,
                        fields=None) for r in found[:limit]]

    async def intake_done(self, *, ingested: Sequence[int], rejected: Mapping[int, str],
                          now: datetime) -> None:
        intake = self._t.intake
        for row_id in ingested:
            if row_id in intake and intake[row_id].error is None:
                del intake[row_id]
        for row_id, error in rejected.items():
            row = intake.get(row_id)
            if row is not None and row.error is None:
                row.error, row.rejected_at = error, now

    async def intake_find(self, queue: str, job_id: str) -> IntakeRow | None:
        found = (r for r in self._rows(pending=True) if r.queue == queue and r.job_id == job_id)
        row = next(found, None)
        limit = int(self._t.meta.get(INTAKE_LIMIT_KEY, INTAKE_MAX_BYTES))
        return None if row is None else _read(row, limit)

    async def intake_rejected_page(self, *, limit: int, queue: str | None = None,
                                   after: tuple[datetime, int] | None = None,
                                   value_chars: int = INTAKE_VALUE_CHARS) -> list[IntakeRow]:
        def sort_key(row: IntakeRow) -> tuple[Any, ...]:
            return (row.rejected_at, row.id)

        found = [r for r in self._rows(pending=False) if r.rejected_at is not None
                 and (queue is None or r.queue == queue)
                 and (after is None or sort_key(r) < after)]
        found.sort(key=sort_key, reverse=True)
        return [_listed(r, value_chars) for r in found[:limit]]

    async def intake_prune(self, *, before: datetime, now: datetime, limit: int) -> int:
        ahead = now + FUTURE_REJECTION
        doomed = [r.id for r in self._rows(pending=False) if r.rejected_at is None
                  or not before <= r.rejected_at <= ahead][:limit]
        for row_id in doomed:
            del self._t.intake[row_id]
        return len(doomed)

    async def intake_limit_set(self, max_bytes: int) -> None:
        self._t.meta[INTAKE_LIMIT_KEY] = str(max_bytes)

    async def intake_counts(self) -> dict[str, tuple[int, int]]:
        every: dict[str, tuple[int, int]] = {}
        for row in self._t.intake.values():
            name = row.queue[:100]
            pending, rejected = every.get(name, (0, 0))
            every[name] = ((pending + 1, rejected) if row.error is None
                           else (pending, rejected + 1))
        others = sorted(name for name in every if name not in self._t.queues)
        counts = {name: every[name] for name in every if name in self._t.queues}
        counts |= {name: every[name] for name in others[:INTAKE_OTHER_NAMES]}
        rest = [every[name] for name in others[INTAKE_OTHER_NAMES:]]
        if rest:
            counts[INTAKE_OTHER] = (sum(p for p, _ in rest), sum(r for _, r in rest))
        return counts

    async def intake_last_id(self) -> int:
        return max(self._t.intake, default=0)


def _id(row: IntakeRow) -> str | None:
    """A row's job id as a read gives it: cut one past the longest valid one."""
    return None if row.job_id is None else row.job_id[:INTAKE_ID_CHARS]


def _read(row: IntakeRow, max_bytes: int) -> IntakeRow:
    """A copy of a pending row as a read gives it: over ``max_bytes``, without its
    values and with why (docs/from-your-database.md, "Limits"); its id cut."""
    if row.size <= max_bytes:
        return replace(row, job_id=_id(row))
    return replace(row, job_id=_id(row), data=None, fields=None,
                   problem=too_big(row.size, max_bytes))


def _listed(row: IntakeRow, chars: int) -> IntakeRow:
    """A copy of a rejected row as a listing gives it: strings and JSON texts over
    ``chars`` cut (named in ``cut``)."""
    values = {"queue": row.queue, "id": row.job_id, "data": row.data, "fields": row.fields,
              "error": row.error}
    cut = tuple(name for name, value in values.items()
                if isinstance(value, str) and len(value) > chars)
    shown = {name: str(values[name])[:chars] for name in cut}
    return replace(row, queue=shown.get("queue", row.queue),
                   job_id=shown.get("id", row.job_id), data=shown.get("data", row.data),
                   fields=shown.get("fields", row.fields),
                   error=shown.get("error", row.error), cut=cut)

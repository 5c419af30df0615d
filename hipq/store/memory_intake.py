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
from hipq.store.records import IntakeRow

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
            rows.append(IntakeRow(id=0, queue=queue, job_id=job.get("id"),
                                  data=_ENCODE(job.get("data") or {}),
                                  run_after=job.get("run_after"), fields=_ENCODE(fields),
                                  enqueued_at=now))
        for row in rows:  # every row or none
            row.id = next(self._t.intake_ids)
            self._t.intake[row.id] = row
        return [row.id for row in rows]

    def _rows(self, *, pending: bool) -> list[IntakeRow]:
        return [r for r in self._t.intake.values() if (r.error is None) is pending]

    async def intake_pending(self, *, queues: Sequence[str], limit: int,
                             after: int = 0) -> list[IntakeRow]:
        wanted = set(queues)
        found = [r for r in self._rows(pending=True) if r.queue in wanted and r.id > after]
        return [replace(r) for r in found[:limit]]

    async def intake_orphans(self, *, known: Sequence[str], before: datetime,
                             limit: int) -> list[IntakeRow]:
        known_set = set(known)
        found = [r for r in self._rows(pending=True)
                 if r.queue not in known_set and r.enqueued_at < before]
        return [replace(r) for r in found[:limit]]

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
        return None if row is None else replace(row)

    async def intake_rejected_page(self, *, limit: int, queue: str | None = None,
                                   after: tuple[datetime, int] | None = None
                                   ) -> list[IntakeRow]:
        def sort_key(row: IntakeRow) -> tuple[Any, ...]:
            return (row.rejected_at, row.id)

        found = [r for r in self._rows(pending=False) if (queue is None or r.queue == queue)
                 and (after is None or sort_key(r) < after)]
        found.sort(key=sort_key, reverse=True)
        return [replace(r) for r in found[:limit]]

    async def intake_counts(self) -> dict[str, tuple[int, int]]:
        counts: dict[str, tuple[int, int]] = {}
        for row in self._t.intake.values():
            pending, rejected = counts.get(row.queue, (0, 0))
            counts[row.queue] = ((pending + 1, rejected) if row.error is None
                                 else (pending, rejected + 1))
        return counts

    async def intake_last_id(self) -> int:
        return max(self._t.intake, default=0)

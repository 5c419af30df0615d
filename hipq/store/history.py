"""A job's history (``job_attempts``): what a job's JSON reads of it, and the
recording of late responses, the same on both databases (used by
:class:`~hipq.store.common.SQLAlchemyStore`).

Both stay bounded whatever a downstream sends (docs/security.md): at most
:data:`LATE_PER_TRY` late responses are recorded per try (the others are only
marked late in the inbox), and a job's JSON reads its last entries and counts the
rest through the ``(queue, job_id, attempt)`` index, never every row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.jobs import Attempt
from hipq.store import schema as s
from hipq.store.records import InboxRow, JobHistory
from hipq.store.rows import chunks

LATE_PER_TRY = 10  # late responses recorded per try (docs/security.md); later ones are only marked
LATE = "late_response"  # the outcome of a late response on the history
TRIES_CHUNK = 300  # tries per count statement: 3 parameters each (SQLite allows 999)

TryKey = tuple[str, str, int]  # (queue, job id, attempt)


async def read_history(conn: AsyncConnection, queue: str, job_id: str, *,
                       limit: int) -> JobHistory:
    """The job's last ``limit`` entries by (attempt, id), oldest first, without the
    responses' bodies, and how many it has in all."""
    t = s.job_attempts
    mine = sa.and_(t.c.queue == queue, t.c.job_id == job_id)
    last = (sa.select(t.c.attempt, t.c.launched_at, t.c.finished_at, t.c.outcome, t.c.error)
            .where(mine).order_by(t.c.attempt.desc(), t.c.id.desc()).limit(limit))
    rows = (await conn.execute(last)).all()
    # counted after: rows are only ever added, so the count covers those read
    total = await conn.scalar(sa.select(sa.func.count()).select_from(t).where(mine))
    tries = [Attempt(attempt=r.attempt, launched_at=r.launched_at, finished_at=r.finished_at,
                     outcome=r.outcome, error=r.error) for r in reversed(rows)]
    return JobHistory(tries=tries, total=max(int(total or 0), len(tries)))


async def record_late(conn: AsyncConnection, rows: Sequence[tuple[str, str, InboxRow]], *,
                      now: datetime) -> None:
    """Record late responses (queue, job id, response) within each try's bound;
    the caller serializes concurrent calls (see ``_late_lock``)."""
    values = await _late_values(conn, rows, now)
    kept = within_late_bound(values, await late_counts(conn, {_try_of(v) for v in values}))
    if kept:
        await conn.execute(s.job_attempts.insert(), kept)


async def _late_values(conn: AsyncConnection, rows: Sequence[tuple[str, str, InboxRow]],
                       now: datetime) -> list[dict[str, Any]]:
    """The history rows of these responses; one without an attempt number belongs
    to the latest try that had its key."""
    a = s.job_attempts
    tries = {r.correlation_key: r.attempt for r in await conn.execute(
        sa.select(a.c.correlation_key, sa.func.max(a.c.attempt).label("attempt"))
        .where(a.c.correlation_key.in_(list({r.correlation_key for _, _, r in rows})))
        .group_by(a.c.correlation_key))}
    return [{"queue": q, "job_id": j, "attempt": r.attempt or tries.get(r.correlation_key) or 0,
             "correlation_key": r.correlation_key, "launched_at": None, "finished_at": now,
             "outcome": LATE, "error": r.error,
             "response": {"status": r.status, "result": r.result}}
            for q, j, r in rows]


async def late_counts(conn: AsyncConnection, tries: Collection[TryKey]) -> Counter[TryKey]:
    """How many late responses each of these tries has recorded: one indexed count
    per chunk of tries (one statement for any usual batch)."""
    a = s.job_attempts
    counts: Counter[TryKey] = Counter()
    for chunk in chunks(sorted(tries), TRIES_CHUNK):
        rows = await conn.execute(
            sa.select(a.c.queue, a.c.job_id, a.c.attempt, sa.func.count())
            .where(sa.tuple_(a.c.queue, a.c.job_id, a.c.attempt).in_(chunk), a.c.outcome == LATE)
            .group_by(a.c.queue, a.c.job_id, a.c.attempt))
        counts.update({(r[0], r[1], r[2]): int(r[3]) for r in rows})
    return counts


def within_late_bound(values: Sequence[dict[str, Any]],
                      recorded: Counter[TryKey]) -> list[dict[str, Any]]:
    """The late responses to record: per try, the first ones (in order) while the
    try has fewer than :data:`LATE_PER_TRY`; ``recorded`` is what each has already."""
    counts = Counter(recorded)
    kept = []
    for value in values:
        key = _try_of(value)
        if counts[key] < LATE_PER_TRY:
            counts[key] += 1
            kept.append(value)
    return kept


def _try_of(values: dict[str, Any]) -> TryKey:
    return values["queue"], values["job_id"], values["attempt"]

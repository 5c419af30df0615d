"""A job's history (``job_attempts``) as both drivers read and write it: what a
job's JSON shows of it, and the bound on recorded late responses. No SQL here:
each driver reads and writes the rows its own way.

Both stay bounded whatever a downstream sends (docs/security.md): at most
:data:`LATE_PER_TRY` late responses are recorded per try (the others are only
marked late in the inbox), and a job's JSON reads its last entries and counts the
rest through the ``(queue, job_id, attempt)`` index, never every row.

An entry's ``error`` is a JSON object or null (docs/http-api.md, the job JSON),
whatever a downstream sent: a late response's error is the downstream's own value,
any JSON (``"disk full"``, ``7``, a list), and is written as :func:`entry_error`
makes it. Rows written otherwise (by a daemon before that, or by hand) are read
through the same function, so that every job stays readable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from hipq.jobs import Attempt, ErrorKind
from hipq.store.records import InboxRow, JobHistory

LATE_PER_TRY = 10  # late responses recorded per try (docs/security.md); later ones are only marked
LATE = "late_response"  # the outcome of a late response on the history

TryKey = tuple[str, str, int]  # (queue, job id, attempt)


def entry_error(value: Any) -> dict[str, Any] | None:
    """A history entry's ``error`` as an object (or None): an object as it is; a
    text as an applied response's text error is recorded (``outcome_from_row`` in
    hipq/engine/decide.py), ``{"kind": "response_failed", "detail": <the text>}``;
    any other value (a number, a list, a boolean) as that with the value under
    ``data`` and an empty ``detail``."""
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str):
        return {"kind": ErrorKind.RESPONSE_FAILED.value, "detail": value}
    return {"kind": ErrorKind.RESPONSE_FAILED.value, "detail": "", "data": value}


def entry_of(r: Any, *, response: bool = True) -> Attempt:
    """A history entry from a row of ``job_attempts`` (a mapping), its ``error`` read
    through :func:`entry_error`; ``response=False``: a row read without the
    response's body."""
    return Attempt(attempt=r["attempt"], launched_at=r["launched_at"],
                   finished_at=r["finished_at"], outcome=r["outcome"],
                   error=entry_error(r["error"]),
                   response=r["response"] if response else None)


def history_of(newest_first: Sequence[Any], total: int | None) -> JobHistory:
    """A job's history from its last rows of ``job_attempts`` (newest first, read
    without the responses' bodies) and the count of all its rows, taken after them
    (rows are only ever added, so the count covers those read)."""
    tries = [entry_of(r, response=False) for r in reversed(newest_first)]
    return JobHistory(tries=tries, total=max(int(total or 0), len(tries)))


def late_values(rows: Sequence[tuple[str, str, InboxRow]], latest: Mapping[str, int],
                now: datetime) -> list[dict[str, Any]]:
    """The history rows of late responses (queue, job id, response); one without an
    attempt number belongs to the latest try that had its key (``latest``: the
    highest attempt recorded per correlation key). Its error as :func:`entry_error`
    makes it: an object, whatever the downstream sent."""
    return [{"queue": q, "job_id": j, "attempt": r.attempt or latest.get(r.correlation_key) or 0,
             "correlation_key": r.correlation_key, "launched_at": None, "finished_at": now,
             "outcome": LATE, "error": entry_error(r.error),
             "response": {"status": r.status, "result": r.result}}
            for q, j, r in rows]


def within_late_bound(values: Sequence[dict[str, Any]],
                      recorded: Counter[TryKey]) -> list[dict[str, Any]]:
    """The late responses to record: per try, the first ones (in order) while the
    try has fewer than :data:`LATE_PER_TRY`; ``recorded`` is what each has already."""
    counts = Counter(recorded)
    kept = []
    for value in values:
        key = try_of(value)
        if counts[key] < LATE_PER_TRY:
            counts[key] += 1
            kept.append(value)
    return kept


def try_of(values: Mapping[str, Any]) -> TryKey:
    """The try (queue, job id, attempt) of a history row's values."""
    return values["queue"], values["job_id"], values["attempt"]

"""Step 3 on PostgreSQL: the statements of a tick's persist (one per kind of change,
the archive's ends split past :data:`MAX_ENDS_CHARS`) and the marks of its inbox
rows, as (statement, arguments) pairs for :class:`~hipq.store.postgres.PostgresStore`
to run in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any

from hipq import json_text
from hipq.store.pgsql import SQL, to_json
from hipq.store.records import Change, ChangeKind, InboxOutcome

_END_OF = attrgetter("queue", "id", "attempt", "status", "result", "error", "outcome",
                     "response")
_ENCODE = json_text.compact
# The ends of one archive statement go as one JSON text, and PostgreSQL holds no text
# over 1 GB: a tick ending hundreds of tries with results of a megabyte (callbacks at
# the API's body bound, a backlog after a restart) would fail its persist at every
# tick, for every queue. Past this many characters the ends go in several statements
# (of the same transaction).
MAX_ENDS_CHARS = 64 * 1024 * 1024


def inbox_of(changes: Sequence[Change]) -> tuple[list[int], list[str], list[str]]:
    """The responses these changes apply: (inbox ids, their queues, their job ids)."""
    pairs = [(i, c.queue, c.id) for c in changes for i in c.inbox_ids]
    return [i for i, _, _ in pairs], [q for _, q, _ in pairs], [j for _, _, j in pairs]


def marks_of(marks: Sequence[tuple[int, InboxOutcome]], now: datetime) -> list[dict[str, Any]]:
    """The values of the ``inbox_mark`` statement, one set per outcome."""
    ids: dict[str, list[int]] = {}
    for inbox_id, outcome in marks:
        ids.setdefault(str(outcome), []).append(inbox_id)
    return [{"ids": group, "outcome": outcome, "now": now} for outcome, group in ids.items()]


def persist_calls(changes: Sequence[Change], owner: str,
                   now: datetime) -> list[tuple[str, list[Any]]]:
    """The (statement, arguments) of each kind of change in ``changes``."""
    j = to_json
    calls: list[tuple[str, list[Any]]] = []
    for kind in ChangeKind:
        batch = [c for c in changes if c.kind is kind]
        if not batch:
            continue
        statement = SQL[str(kind)]
        if kind is ChangeKind.ARCHIVE:
            for part, ends in ends_parts(batch):
                calls.append((statement.sql, statement.args(
                    **_inbox_common(part, owner, now), ends=ends)))
            continue
        common = _inbox_common(batch, owner, now)
        values: dict[str, Any] = {"queues": [c.queue for c in batch],
                                  "ids": [c.id for c in batch],
                                  "attempts": [c.attempt for c in batch]}
        if kind is ChangeKind.REQUEUE:
            values |= {"run_ats": [c.run_at for c in batch],
                       "datas": [j(c.data) for c in batch],
                       "errors": [j(c.error) for c in batch],
                       "outcomes": [c.outcome or "unknown" for c in batch],
                       "responses": [j(c.response) for c in batch],
                       "keys": [c.correlation_key for c in batch],
                       "backs": [1 if c.give_back else 0 for c in batch],
                       "tokens": [c.token for c in batch]}
        else:
            values["deadlines"] = [c.deadline for c in batch]
        calls.append((statement.sql, statement.args(**common, **values)))
    return calls


def _inbox_common(batch: Sequence[Change], owner: str, now: datetime) -> dict[str, Any]:
    ids, queues, jobs = inbox_of(batch)
    return {"owner": owner, "now": now, "inbox_ids": ids, "inbox_queues": queues,
            "inbox_jobs": jobs}


def ends_parts(changes: Sequence[Change]) -> list[tuple[Sequence[Change], str]]:
    """The changes' ends as JSON text, in one part or, past :data:`MAX_ENDS_CHARS`,
    in halves until each part is under it (or one change)."""
    ends = _ENCODE(list(map(_END_OF, changes)))
    if len(ends) <= MAX_ENDS_CHARS or len(changes) == 1:
        return [(changes, ends)]
    half = len(changes) // 2
    return [*ends_parts(changes[:half]), *ends_parts(changes[half:])]

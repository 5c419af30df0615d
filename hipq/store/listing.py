"""Operators' listings of the response inbox: the statement and its rows, the same
on both databases (used by :meth:`SQLAlchemyStore.inbox_list_unmatched
<hipq.store.common.SQLAlchemyStore.inbox_list_unmatched>`).

A stored ``result`` or ``error`` may be as large as a response body (a Kafka
message, ``api.max_body_bytes``); a listing reads at most ``value_chars``
characters of each: the statement compares the length of the value's JSON text
and returns either the value (short enough) or the cut text, so a page never
carries more than ``limit x 2 x value_chars`` characters of values.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa

from hipq.store import schema as s
from hipq.store.records import ListedResponse

_VALUES = ("result", "error")


def _bounded(column: sa.Column[Any], value_chars: int) -> tuple[sa.ColumnElement[Any], ...]:
    """(the value if its JSON text fits, else NULL; the cut text if it does not)."""
    text = sa.cast(column, sa.Text)  # jsonb::text on PostgreSQL; the stored text on SQLite
    fits = sa.func.length(text) <= value_chars
    whole = sa.type_coerce(sa.case((fits, column), else_=sa.null()), s.JSON)
    cut = sa.case((fits, sa.null()), else_=sa.func.substr(text, 1, value_chars))
    return (whole.label(f"{column.name}_whole"),
            sa.type_coerce(cut, sa.Text).label(f"{column.name}_cut"))


def unmatched_query(*, limit: int, after: tuple[datetime, int] | None,
                    value_chars: int) -> sa.Select[Any]:
    """Unmatched responses, newest first: a range scan of ``ix_response_inbox_unmatched``
    (its predicate is a literal, so PostgreSQL's generic plans use it too)."""
    t = s.response_inbox
    stmt = (sa.select(t.c.id, t.c.correlation_key, t.c.attempt, t.c.status, t.c.source,
                      t.c.received_at, t.c.applied_at,
                      *_bounded(t.c.result, value_chars), *_bounded(t.c.error, value_chars))
            .where(t.c.outcome == s.UNMATCHED)
            .order_by(t.c.received_at.desc(), t.c.id.desc()).limit(limit))
    if after is not None:
        stmt = stmt.where(sa.tuple_(t.c.received_at, t.c.id) < sa.tuple_(
            sa.literal(after[0], s.UTCDateTime), sa.literal(after[1], s.BigId)))
    return stmt


def listed_response(row: Any) -> ListedResponse:
    """A :class:`ListedResponse` from a row of :func:`unmatched_query` (a mapping)."""
    values = {name: row[f"{name}_whole"] if row[f"{name}_cut"] is None else row[f"{name}_cut"]
              for name in _VALUES}
    return ListedResponse(
        id=row["id"], correlation_key=row["correlation_key"], attempt=row["attempt"],
        status=row["status"], source=row["source"], received_at=row["received_at"],
        recorded_at=row["applied_at"], result=values["result"], error=values["error"],
        truncated=tuple(name for name in _VALUES if row[f"{name}_cut"] is not None))

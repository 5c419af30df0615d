"""Operators' listings of the response inbox: the row each driver's statement
returns, as a record (the statements: SQLite's in :mod:`hipq.store.sqlite_reads`,
PostgreSQL's ``unmatched_page`` in ``postgres.sql``).

A stored ``result`` or ``error`` may be as large as a response body (a Kafka
message, ``api.max_body_bytes``); a listing reads at most ``value_chars``
characters of each: the statement compares the length of the value's JSON text
and returns either the value (``<name>_whole``, short enough) or the cut text
(``<name>_cut``), so a page never carries more than ``limit x 2 x value_chars``
characters of values.
"""

from __future__ import annotations

from typing import Any

from hipq.store.records import ListedResponse

VALUES = ("result", "error")  # the values a listing bounds


def listed_response(row: Any) -> ListedResponse:
    """A :class:`ListedResponse` from a row of an unmatched-responses listing (a
    mapping with ``<name>_whole`` and ``<name>_cut`` for each of :data:`VALUES`)."""
    values = {name: row[f"{name}_whole"] if row[f"{name}_cut"] is None else row[f"{name}_cut"]
              for name in VALUES}
    return ListedResponse(
        id=row["id"], correlation_key=row["correlation_key"], attempt=row["attempt"],
        status=row["status"], source=row["source"], received_at=row["received_at"],
        recorded_at=row["applied_at"], result=values["result"], error=values["error"],
        truncated=tuple(name for name in VALUES if row[f"{name}_cut"] is not None))

"""The keyset cursors of the list routes: their published shapes, and times as text.

Cursors are readable and total: every string their pattern matches (which
``/openapi.json`` publishes) is a position, so the document is exact about them
(docs/http-api.md, "Paging"). A time is its microseconds since 0001-01-01 UTC (one
past the last time means "the end"). Clients should still treat a cursor as opaque.

This module imports no aiohttp: :mod:`hipq.api.models` (and so :mod:`hipq.client`)
uses it. Checking a cursor against its pattern is :func:`hipq.api.io.cursor_parts`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import Field

_EPOCH = datetime(1, 1, 1, tzinfo=UTC)
_LAST_MICROS = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
CURSOR_TIME = r"[0-9]{1,18}"
CURSOR_NAME = r"[A-Za-z0-9_.:-]{1,200}"  # a queue or a job id (they compare as text)
CURSOR_ROW = r"[0-9]{1,18}"  # a row id
ARCHIVED_CURSOR = rf"^{CURSOR_TIME}~{CURSOR_NAME}~{CURSOR_NAME}$"
ROW_CURSOR = rf"^{CURSOR_TIME}~{CURSOR_ROW}$"  # a time and a row id: responses, intake
MAX_CURSOR_CHARS = 500


def cursor_param(pattern: str, what: str) -> Any:
    """A ``cursor`` query field: its pattern is published and checked by
    :func:`hipq.api.io.cursor_parts` (400 ``invalid_cursor``, not a 422 from the
    model)."""
    return Field(default=None, max_length=MAX_CURSOR_CHARS,
                 json_schema_extra={"pattern": pattern},
                 description=f"next_cursor of the previous page ({what})")


def time_text(at: datetime) -> str:
    return str((at.astimezone(UTC) - _EPOCH) // timedelta(microseconds=1))


def time_of(text: str) -> datetime:
    return _EPOCH + timedelta(microseconds=min(int(text), _LAST_MICROS))

"""``GET /v1/intake?status=rejected``: the rows enqueued from SQL (docs/from-your-database.md,
docs/from-your-database.md) that broke a rule at ingest (unknown queue, bad id or
data, an unknown field, a conflict), each kept with its error; newest first,
keyset-paginated like the archive.

Only rejected rows are listed: a pending row lives until its queue's owner next
ticks (counted in ``GET /v1/stats`` as ``intake.pending``; a job still pending is
found by ``GET /v1/jobs/{queue}/{id}``), so ``status=pending`` is a 422.

A page holds at most ``limit`` rows and about :data:`~hipq.api.paging.PAGE_BYTES`
of JSON (at least one row), read from the store in chunks
(:func:`~hipq.api.paging.collect_page`). The rows come from producers, not through
the API's body checks, so any of their values may be large: a string (``queue``,
``id``, ``error``) or a value's JSON text (``data``, ``fields``) longer than
:data:`VALUE_CHARS` characters is cut there by the database, before it is read, and
named in ``truncated``. A time the store cannot read (an owner may store
``infinity``) is shown as null; a row whose rejection time it cannot read is not
listed (it is pruned: docs/from-your-database.md, "Limits"). The cursor
is the last row's (rejected_at, id), encoded as the unmatched responses' cursor
(:mod:`hipq.api.responses_page`); a bad one is a 400 ``invalid_cursor``.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from aiohttp import web
from pydantic import AwareDatetime, Field

from hipq.api.cursors import ROW_CURSOR, cursor_param
from hipq.api.deps import DEPS
from hipq.api.io import read_query
from hipq.api.models import MAX_PAGE, _In, _Out
from hipq.api.paging import collect_page
from hipq.api.responses_page import decode_cursor, encode_cursor
from hipq.store.records import IntakeRow

VALUE_CHARS = 4096  # characters of a row's string or value's JSON text shown in a listing
# a queue name to filter by: any text (rows may name a queue that does not exist), short
# enough that a request line holding it and a cursor, percent-encoded, stays under
# aiohttp's 8,190 bytes (a longer one is refused before any handler, not as JSON)
QUEUE_FILTER_CHARS = 200
Cut = Literal["queue", "id", "data", "fields", "error"]
_CUT: tuple[Cut, ...] = ("queue", "id", "data", "fields", "error")
_VALUES = frozenset({"data", "fields"})  # shown as JSON values, cut as their JSON text


class IntakeQuery(_In):
    status: Literal["rejected"] = Field(
        default="rejected", description="which rows: those rejected at ingest (pending rows "
        "are counted in /v1/stats as intake.pending)")
    queue: Annotated[str, Field(min_length=1, max_length=QUEUE_FILTER_CHARS)] | None = Field(
        default=None, description="only the rows naming this queue (one that does not exist "
        "too: its rows are rejected as 'unknown queue')")
    limit: int = Field(default=100, ge=1, le=MAX_PAGE)
    cursor: str | None = cursor_param(ROW_CURSOR, "rejected_at~id")


class IntakeRowOut(_Out):
    """A row of the intake as the producer wrote it, with the error it was rejected
    with. Values over 4,096 characters (a string, or a value's JSON text) are cut
    there, the cut ones named in ``truncated``."""

    intake_id: int = Field(description="the row's id in job_intake")
    queue: str
    id: str | None = Field(description="the job id given (null: none, the job would have "
                           "been intake-<intake_id>)")
    data: Any = None
    run_after: AwareDatetime | None
    fields: Any = Field(default=None, description="the other enqueue fields given")
    enqueued_at: AwareDatetime | None = Field(description="null: a time hipq cannot read")
    error: str | None = Field(description="why the row was rejected")
    rejected_at: AwareDatetime | None
    truncated: list[Cut] = Field(default_factory=list)


class IntakePageOut(_Out):
    rows: list[IntakeRowOut]
    next_cursor: str | None


def intake_row_out(row: IntakeRow) -> IntakeRowOut:
    """The row's JSON with its large values cut (see the module docstring): by the
    store (``row.cut``: given as the cut text), else here."""
    body = row.to_json()
    cut: list[Cut] = [name for name in _CUT if name in row.cut]
    for name in _CUT:
        if name in cut:
            continue
        value = body[name]
        if name in _VALUES:
            text = _json_text(value)
        elif isinstance(value, str):
            text = value
        else:
            continue  # no id given (null)
        if text is None or len(text) > VALUE_CHARS:
            body[name] = (text or "")[:VALUE_CHARS]
            cut.append(name)
    cut.sort(key=_CUT.index)
    return IntakeRowOut.model_validate(body | {"truncated": cut})


def _json_text(value: Any) -> str | None:
    """``value`` as JSON text; None when it cannot be written (nested too deep)."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (RecursionError, ValueError):
        return None


async def rejected_rows(request: web.Request) -> web.Response:
    query = read_query(request, IntakeQuery)
    store = request.app[DEPS].service.store

    async def read(limit: int, after: tuple[datetime, int] | None) -> list[IntakeRow]:
        return await store.intake_rejected_page(limit=limit, queue=query.queue, after=after,
                                                value_chars=VALUE_CHARS)

    page, last, more = await collect_page(
        read, _row_json, _row_key, limit=query.limit,
        after=None if query.cursor is None else decode_cursor(query.cursor))
    key = _row_key(last[0]) if more and last else None
    cursor = None if key is None else encode_cursor(*key)
    body = '{"rows":[' + ",".join(page) + '],"next_cursor":' + json.dumps(cursor) + "}"
    return web.Response(body=body.encode(), content_type="application/json")


def _row_json(row: IntakeRow) -> str:
    return intake_row_out(row).model_dump_json()


def _row_key(row: IntakeRow) -> tuple[datetime, int] | None:
    return None if row.rejected_at is None else (row.rejected_at, row.id)

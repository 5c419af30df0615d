"""``GET /v1/responses?outcome=unmatched``: the responses recorded as unmatched (their
correlation key matched no job within ``responses.buffer_seconds``), newest first,
keyset-paginated.

Pages are bounded like the archived-jobs pages: at most ``limit`` items and about
:data:`~hipq.api.paging.PAGE_BYTES` of JSON (at least one item), read from the
store in chunks; besides, each item's ``result`` and ``error`` are cut to
:data:`VALUE_CHARS` characters of JSON text by the store itself, so a response
stored with a large body costs a page little. The cursor is the last item's
(received_at, id) as ``<microseconds>~<id>``; a bad one is a 400 ``invalid_cursor``.
"""

from __future__ import annotations

import json
from datetime import datetime

from aiohttp import web

from hipq.api.cursors import ROW_CURSOR, time_of, time_text
from hipq.api.deps import DEPS
from hipq.api.io import cursor_parts, read_query
from hipq.api.models import ResponseOut, ResponsesQuery
from hipq.api.paging import collect_page
from hipq.store import ListedResponse

VALUE_CHARS = 4096  # characters of a result's or an error's JSON text shown in a listing
_MAX_ID = 2**63 - 1  # inbox ids are BIGINT


def encode_cursor(received_at: datetime, row_id: int) -> str:
    return f"{time_text(received_at)}~{row_id}"


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """The (received_at, id) in ``cursor``; 400 unless it has the shape
    :data:`~hipq.api.cursors.ROW_CURSOR` (any such cursor is a position)."""
    when, row_id = cursor_parts(cursor, ROW_CURSOR)
    return time_of(when), int(row_id)


def response_out(row: ListedResponse) -> ResponseOut:
    return ResponseOut.model_validate(row, from_attributes=True)


async def unmatched_responses(request: web.Request) -> web.Response:
    query = read_query(request, ResponsesQuery)
    service = request.app[DEPS].service

    async def read(limit: int, after: tuple[datetime, int] | None) -> list[ListedResponse]:
        return await service.list_unmatched(limit=limit, after=after, value_chars=VALUE_CHARS)

    page, last, more = await collect_page(
        read, _row_json, _row_key, limit=query.limit,
        after=None if query.cursor is None else decode_cursor(query.cursor))
    cursor = encode_cursor(*_row_key(last[0])) if more and last else None
    body = '{"responses":[' + ",".join(page) + '],"next_cursor":' + json.dumps(cursor) + "}"
    return web.Response(body=body.encode(), content_type="application/json")


def _row_json(row: ListedResponse) -> str:
    return response_out(row).model_dump_json()


def _row_key(row: ListedResponse) -> tuple[datetime, int]:
    return row.received_at, row.id

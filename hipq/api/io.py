"""Reading requests and writing answers: JSON in, pydantic-validated, JSON out."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel

from hipq.api.api_errors import ApiError
from hipq.api.cursors import ARCHIVED_CURSOR, time_of, time_text
from hipq.api.deps import DEPS
from hipq.json_types import type_problem
from hipq.values import MAX_DEPTH, json_problem

M = TypeVar("M", bound=BaseModel)


# Media types a web page may POST without a CORS preflight: refused, so no page
# can drive the API from a browser (docs/security.md, "Hostile input").
SIMPLE_CONTENT_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded",
                                  "multipart/form-data"})
# the body's own levels above a value's (e.g. ``{"data": ...}``): the models check
# the values themselves at exactly MAX_DEPTH
BODY_DEPTH = MAX_DEPTH + 2


def refuse_simple_content_type(request: web.Request) -> None:
    """415 for a body whose content type a browser sends without asking."""
    if "Content-Type" in request.headers and request.content_type in SIMPLE_CONTENT_TYPES:
        raise ApiError(415, "unsupported_media_type",
                       "send JSON: 'Content-Type: application/json' (curl: --json)")


def _check_text(value: Any) -> None:
    """PostgreSQL cannot store NUL characters in text or JSON: refuse them up front."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                raise ApiError(422, "invalid_request", "NUL characters are not allowed")
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def parse_json(raw: bytes) -> Any:
    """The JSON value of ``raw`` (400 if it is not JSON). ``NaN``, ``Infinity`` and
    numbers too large for a float come back as non-finite floats, for the value
    checks to refuse with 422 (one batch item, not the whole batch)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}"[:300]) from None


def check_value(value: Any, *, max_depth: int = BODY_DEPTH) -> Any:
    """``value`` if it is storable (:mod:`hipq.values`), else 422."""
    problem = json_problem(value, max_depth=max_depth)
    if problem is not None:
        raise ApiError(422, "invalid_request", f"the body is not acceptable: {problem}")
    return value


async def read_json(request: web.Request, *, empty: Any = None, check: bool = True) -> Any:
    """The body as JSON (``empty`` if there is none), checked by :func:`check_value`
    unless ``check`` is False (a batch checks its items one by one). A body over the
    app's ``client_max_size`` raises 413 from aiohttp; the middleware answers it. A
    body that has not arrived within ``api.body_timeout_seconds`` is a 408."""
    refuse_simple_content_type(request)
    try:  # a body trickled in holds a connection: bounded (hipq/api/connections.py)
        async with asyncio.timeout(request.app[DEPS].config.body_timeout_seconds):
            raw = await request.read()
    except TimeoutError:
        raise ApiError(408, "request_timeout", "the body did not arrive in time") from None
    if not raw.strip():
        if empty is None:
            raise ApiError(400, "invalid_json", "a JSON body is required")
        return empty
    value = parse_json(raw)
    return check_value(value) if check else value


async def read_body(request: web.Request, model: type[M], *, empty: Any = None,
                    check: bool = True) -> M:
    """The body validated by ``model``, after its JSON types are checked against the
    published schema (:mod:`hipq.json_types`: no ``0`` for ``false``)."""
    value = await read_json(request, empty=empty, check=check)
    problem = type_problem(value, model)
    if problem is not None:
        raise ApiError(422, "invalid_request", "the request is not valid",
                       [{"loc": problem[0], "msg": problem[1], "type": "json_type"}])
    return model.model_validate(value)


def read_query(request: web.Request, model: type[M]) -> M:
    query = dict(request.query)
    _check_text(query)
    return model.model_validate(query)


def reply(model: BaseModel, status: int = 200) -> web.Response:
    return web.Response(body=model.model_dump_json(), status=status,
                        content_type="application/json")


def cursor_parts(cursor: str, pattern: str) -> list[str]:
    """The ``~``-separated parts of ``cursor``; 400 ``invalid_cursor`` unless it
    matches ``pattern`` (one of :mod:`hipq.api.cursors`)."""
    if re.fullmatch(pattern, cursor) is None:
        raise ApiError(400, "invalid_cursor", "the cursor is not one this API gives out")
    return cursor.split("~")


def encode_cursor(finished_at: datetime, queue: str, job_id: str) -> str:
    return f"{time_text(finished_at)}~{queue}~{job_id}"


def decode_cursor(cursor: str) -> tuple[datetime, str, str]:
    """The (finished_at, queue, id) of an archived-jobs cursor; 400 if it has not
    the shape :data:`ARCHIVED_CURSOR`."""
    when, queue, job_id = cursor_parts(cursor, ARCHIVED_CURSOR)
    return time_of(when), queue, job_id

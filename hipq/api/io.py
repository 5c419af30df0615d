"""Reading requests and writing answers: JSON in, pydantic-validated, JSON out."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel

from hipq.api.errors import ApiError

M = TypeVar("M", bound=BaseModel)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


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
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}"[:300]) from None
    if b"\\u0000" in raw:  # a NUL can only come escaped (raw control characters are invalid)
        _check_text(value)
    return value


async def read_json(request: web.Request, *, empty: Any = None) -> Any:
    """The body as JSON (``empty`` if there is none). A body over the app's
    ``client_max_size`` raises 413 from aiohttp; the middleware answers it."""
    raw = await request.read()
    if not raw.strip():
        if empty is None:
            raise ApiError(400, "invalid_json", "a JSON body is required")
        return empty
    return parse_json(raw)


async def read_body(request: web.Request, model: type[M], *, empty: Any = None) -> M:
    return model.model_validate(await read_json(request, empty=empty))


def read_query(request: web.Request, model: type[M]) -> M:
    query = dict(request.query)
    _check_text(query)
    return model.model_validate(query)


def reply(model: BaseModel, status: int = 200) -> web.Response:
    return web.Response(body=model.model_dump_json(), status=status,
                        content_type="application/json")


def encode_cursor(finished_at: datetime, queue: str, job_id: str) -> str:
    raw = json.dumps([finished_at.isoformat(), queue, job_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        when, queue, job_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        at = datetime.fromisoformat(when)
        if at.tzinfo is None or not isinstance(queue, str) or not isinstance(job_id, str):
            raise ValueError("bad cursor")
    except (ValueError, TypeError, UnicodeError):
        raise ApiError(400, "invalid_cursor", "the cursor is not one this API gave out") from None
    _check_text([queue, job_id])
    return at, queue, job_id

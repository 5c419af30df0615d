"""Errors over HTTP: one middleware maps every failure to
``{"error": {"code", "message", "details"}}`` with its status.

==========================================  ======  ==========================
what                                        status  code
==========================================  ======  ==========================
body is not JSON (or has NaN, is too deep)  400     ``invalid_json``
bad ``cursor``                              400     ``invalid_cursor``
no/unknown bearer token, bad signature      401     ``unauthorized``
token's role too low                        403     ``forbidden``
unknown queue / job / route                 404     ``*_not_found``
method not allowed on the route             405     ``method_not_allowed``
body slower than ``body_timeout_seconds``   408     ``request_timeout``
idempotency conflict, job not cancellable   409     ``conflict``
response for a stale attempt                409     ``stale_response``
body over ``api.max_body_bytes``            413     ``body_too_large``
body sent as text/plain, a form...         415     ``unsupported_media_type``
valid JSON failing validation (types,       422     ``invalid_request`` (pydantic
unknown fields, ids, data not an object)            errors in ``details``) or
                                                    ``invalid``
database unavailable                        503     ``store_unavailable``
a connection over ``api.max_connections*``  503     ``too_many_connections``
an answer the server cannot build (logged)  500     ``internal``
anything else (a bug; logged)               500     ``internal``
==========================================  ======  ==========================

Error bodies never carry SQL, bind parameters, driver messages or stack traces:
a database error answers "database unavailable" (503) or "internal error" (500)
and its detail goes to the log only.

**Input and output.** A request is read with the request models (``_In``'s
subclasses, the core's ``QueueConfig``, ``EnqueueRequest``...); an answer is built
with the answer models (``_Out``'s subclasses, :mod:`hipq.api.models` and the
routes' modules), from the server's own data. Both fail with pydantic's
``ValidationError``, which names the model validated (its ``title``): a request
model's failure is the reader's 422, an answer model's is the server's 500, logged
with its traceback, its complaint never shown (it would name the server's data,
and blame the reader for it: issue 46, a job whose history the answer model
refused was a 422 ``invalid_request``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import ValidationError as PydanticValidationError

from hipq.api.models import _Out
from hipq.errors import (
    ConfigError,
    ConflictError,
    HipqError,
    NotFound,
    StoreError,
    TransientStoreError,
    ValidationError,
)

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_STATUS: list[tuple[type[HipqError], int]] = [
    (NotFound, 404),
    (ConflictError, 409),
    (ValidationError, 422),
    (ConfigError, 422),
    (TransientStoreError, 503),
]
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large",
               415: "unsupported_media_type",
               400: "bad_request", 401: "unauthorized", 403: "forbidden"}


class ApiError(Exception):
    """An HTTP error raised by the API layer itself (auth, parsing)."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details


def error_response(status: int, code: str, message: str, details: Any = None,
                   headers: dict[str, str] | None = None) -> web.Response:
    body = {"error": {"code": code, "message": message, "details": details}}
    return web.json_response(body, status=status, headers=headers)


def pydantic_details(exc: PydanticValidationError) -> list[dict[str, Any]]:
    return [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
            for e in exc.errors(include_url=False, include_context=False, include_input=False)]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return error_response(exc.status, exc.code, exc.message, exc.details, headers)
    except PydanticValidationError as exc:
        if not is_answer_failure(exc):
            return error_response(422, "invalid_request", "the request is not valid",
                                  pydantic_details(exc))
        log.exception("could not build the answer to %s %s", request.method, request.path,
                      extra={"action": "api_answer_error"})
        return error_response(500, "internal", "internal error (logged)")
    except HipqError as exc:
        return _hipq_error(request, exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "http_error")
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return error_response(exc.status, code, exc.reason, headers=allow)
    except (OverflowError, RecursionError):
        return error_response(422, "invalid_request", "a value is out of range")
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path,
                      extra={"action": "api_error"})
        return error_response(500, "internal", "internal error (logged)")


def is_answer_failure(exc: PydanticValidationError) -> bool:
    """Whether ``exc`` is an answer model's failure (one built from the server's own
    data), not a request's."""
    return exc.title in _answer_models()


def _answer_models() -> set[str]:
    """The names of the answer models loaded: ``_Out`` and its subclasses (read on
    the error path only, so that a route module's own models count too)."""
    names: set[str] = set()
    stack: list[type[_Out]] = [_Out]
    while stack:
        model = stack.pop()
        names.add(model.__name__)
        stack.extend(model.__subclasses__())
    return names


def _hipq_error(request: web.Request, exc: HipqError) -> web.Response:
    if isinstance(exc, StoreError):  # its text may hold SQL and parameters: log only
        transient = isinstance(exc, TransientStoreError)
        log.log(logging.WARNING if transient else logging.ERROR, "database error in %s %s: %s",
                request.method, request.path, exc, extra={"action": "api_store_error"})
        if transient:
            return error_response(503, exc.code, "database unavailable")
        return error_response(500, "internal", "internal error (logged)")
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return error_response(status, exc.code, str(exc))
    log.error("error in %s %s: %s", request.method, request.path, exc,
              extra={"action": "api_error"})
    return error_response(500, "internal", "internal error (logged)")

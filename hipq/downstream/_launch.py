"""What a downstream receives (:class:`Launch`) and how its handler's outcome
becomes the response body hipq reads (docs/http-api.md: ``status``, ``retryable``,
``result``, ``error``, ``attempt``), encoded once (:func:`encode_outcome`).

A Launch's repr shows its callback URL without the query: the query holds the
signature and the job's token, which no repr and no log line shows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode


class Fail(Exception):
    """Raise from a handler to fail the try with ``message``; ``retryable=False``
    (the default) tells hipq not to try again."""

    def __init__(self, message: str, *, retryable: bool = False,
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.details = dict(details or {})


class BadLaunch(ValueError):
    """A message that is not a hipq launch (missing or mistyped fields)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """One try of one job, as hipq sends it (HTTP body or Kafka value)."""

    id: str
    queue: str
    data: dict[str, Any]
    attempt: int
    max_attempts: int
    correlation_key: str
    callback_url: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        callback = None if self.callback_url is None else without_query(self.callback_url)
        return (f"Launch(id={self.id!r}, queue={self.queue!r}, data={self.data!r}, "
                f"attempt={self.attempt!r}, max_attempts={self.max_attempts!r}, "
                f"correlation_key={self.correlation_key!r}, callback_url={callback!r})")

    @classmethod
    def from_json(cls, body: Any, *, correlation_key: str | None = None) -> Launch:
        if not isinstance(body, dict):
            raise BadLaunch("a launch is a JSON object")
        try:
            return cls(id=_text(body, "id"), queue=_text(body, "queue"),
                       data=_object(body.get("data")), attempt=_int(body, "attempt"),
                       max_attempts=_int(body, "max_attempts"),
                       correlation_key=correlation_key or _text(body, "correlation_key"),
                       callback_url=_optional_text(body, "callback_url"), raw=body)
        except (KeyError, TypeError) as exc:
            raise BadLaunch(f"not a hipq launch: {exc}") from None


def _text(body: Mapping[str, Any], key: str) -> str:
    value = body[key]
    if not isinstance(value, str) or not value:
        raise TypeError(f"{key!r} must be a non-empty string")
    return value


def _optional_text(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{key!r} must be a string or null")
    return value or None


def without_query(url: str) -> str:
    """``url`` for a repr or a log line: its query (a signature, a token) and
    fragment replaced by ``?...``."""
    head, cut, _ = url.partition("?")
    head, hash_, _ = head.partition("#")
    return head + ("?..." if cut or hash_ else "")


def _int(body: Mapping[str, Any], key: str) -> int:
    value = body[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{key!r} must be an integer")
    return value


def _object(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError("'data' must be an object")
    return value


Handler = Callable[[Launch], Awaitable[Any]]


async def outcome(handler: Handler, launch: Launch) -> dict[str, Any]:
    """Run the handler; its return value, a :class:`Fail` or any other exception
    as the response body."""
    try:
        result = await handler(launch)
    except Fail as exc:
        return {"status": "failed", "attempt": launch.attempt, "retryable": exc.retryable,
                "error": {"message": exc.message, **exc.details}}
    except Exception as exc:
        log.warning("handler failed on %s/%s (attempt %s): %r", launch.queue, launch.id,
                    launch.attempt, exc, extra={"action": "handler_error"})
        return {"status": "failed", "attempt": launch.attempt, "retryable": True,
                "error": {"message": str(exc) or type(exc).__name__,
                          "type": type(exc).__name__}}
    return {"status": "succeeded", "attempt": launch.attempt, "result": result}


def encode_outcome(body: dict[str, Any]) -> bytes:
    """``body`` as compact UTF-8 JSON (values JSON does not know as their ``str``). A
    result that cannot be encoded (a cycle, nesting too deep, a lone surrogate)
    fails the try instead, not retryable: the same result would fail again."""
    try:
        return _ENCODE(body).encode()
    except (ValueError, TypeError, RecursionError) as exc:
        log.warning("an outcome could not be encoded as JSON (%s); sent as a failure",
                    type(exc).__name__, extra={"action": "outcome_not_encodable"})
    return _ENCODE({"status": "failed", "attempt": body.get("attempt"), "retryable": False,
                    "error": {"message": "the handler's result could not be encoded as JSON",
                              "type": "unencodable_result"}}).encode()

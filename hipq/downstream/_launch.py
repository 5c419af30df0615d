"""What a downstream receives (:class:`Launch`) and how its handler's outcome
becomes the response body hipq reads (SPEC 6: ``status``, ``retryable``,
``result``, ``error``, ``attempt``)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


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

    @classmethod
    def from_json(cls, body: Any, *, correlation_key: str | None = None) -> Launch:
        if not isinstance(body, dict):
            raise BadLaunch("a launch is a JSON object")
        try:
            return cls(id=_text(body, "id"), queue=_text(body, "queue"),
                       data=_object(body.get("data")), attempt=_int(body, "attempt"),
                       max_attempts=_int(body, "max_attempts"),
                       correlation_key=correlation_key or _text(body, "correlation_key"),
                       callback_url=body.get("callback_url") or None, raw=body)
        except (KeyError, TypeError) as exc:
            raise BadLaunch(f"not a hipq launch: {exc}") from None


def _text(body: Mapping[str, Any], key: str) -> str:
    value = body[key]
    if not isinstance(value, str) or not value:
        raise TypeError(f"{key!r} must be a non-empty string")
    return value


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

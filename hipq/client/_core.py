"""What the sync and the async client share: the calls (method, path, body),
the answers' models, the error, the retry policy and batch chunking. No I/O here.

Retries: a 503 answer or a connection error is tried again after a back-off
(0.5 s, 1 s, 2 s: four tries within about 4 s of waiting, bounded by
``RetryPolicy.budget_seconds``). A request whose bytes may have reached the
server (a read error or a timeout) is retried only when repeating it is harmless:
every call but ``replay`` (enqueue is idempotent by id).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from hipq import errors
from hipq.api.models import MAX_BATCH, BatchResult, JobOut
from hipq.bodies import BatchItem, EnqueueRequest

DEFAULT_TIMEOUT = 10.0
DEFAULT_PAGE_SIZE = 100
# under the API's default api.max_body_bytes (1 MiB), with room for the envelope
DEFAULT_MAX_BATCH_BYTES = 1_000_000
RETRY_AFTER_CAP_SECONDS = 5.0


class ApiStatusError(errors.HipqError):
    """A non-2xx answer of the API: ``status`` (HTTP), ``code`` and ``message`` from
    the error body (``{"error": {"code", "message", "details"}}``)."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueResult:
    """The answer to an enqueue: ``created`` (201) or ``exists`` (200, a repeat)."""

    status: Literal["created", "exists"]
    job: JobOut


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    tries: int = 4
    first_delay_seconds: float = 0.5
    factor: float = 2.0
    budget_seconds: float = 10.0

    def delay(self, tries_done: int) -> float:
        return self.first_delay_seconds * self.factor ** (tries_done - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    method: str
    path: str
    body: Any = None
    content: bytes | None = None  # an already encoded JSON body (batches)
    params: Mapping[str, str | int] | None = None
    idempotent: bool = True

    def request_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"params": {k: v for k, v in (self.params or {}).items()
                                             if v is not None}}
        if self.content is not None:
            kwargs["content"] = self.content
            kwargs["headers"] = {"Content-Type": "application/json"}
        elif self.body is not None:
            kwargs["json"] = self.body
        return kwargs


@dataclass(slots=True)
class Retrying:
    """The retry state of one call: ``after_*`` returns the seconds to wait before
    the next try, or None when the outcome stands (raise it / return it)."""

    policy: RetryPolicy
    call: Call
    started: float
    tries: int = 0
    last_retry_after: float | None = field(default=None)

    def _next(self, now: float, wanted: float | None = None) -> float | None:
        self.tries += 1
        if self.tries >= self.policy.tries:
            return None
        delay = max(self.policy.delay(self.tries), min(wanted or 0.0, RETRY_AFTER_CAP_SECONDS))
        if now - self.started + delay > self.policy.budget_seconds:
            return None
        return delay

    def after_error(self, exc: httpx.TransportError, now: float) -> float | None:
        sent = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
        if sent and not self.call.idempotent:
            return None
        return self._next(now)

    def after_response(self, response: httpx.Response, now: float) -> float | None:
        if response.status_code != 503:
            return None
        return self._next(now, _retry_after(response.headers.get("Retry-After")))


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def checked(response: httpx.Response) -> Any:
    """The decoded JSON of a 2xx answer; an :class:`ApiStatusError` otherwise."""
    if response.is_success:
        return response.json() if response.content else None
    code, message, details = "http_error", response.reason_phrase or "error", None
    try:
        error = response.json()["error"]
        code, message, details = str(error["code"]), str(error["message"]), error.get("details")
    except (ValueError, KeyError, TypeError):
        if response.text:
            message = response.text[:500]
    raise ApiStatusError(response.status_code, code, message, details)


# -- requests ---------------------------------------------------------------------


def enqueue_call(queue: str, job_id: str, data: Mapping[str, Any] | None,
                 fields: Mapping[str, Any]) -> Call:
    body = {"data": dict(data or {}), **fields}
    request = EnqueueRequest.model_validate(body)  # bad input fails here, before sending
    return Call(method="PUT", path=f"/v1/jobs/{queue}/{job_id}",
                body=request.model_dump(mode="json", exclude_unset=True))


def enqueue_result(response: httpx.Response) -> EnqueueResult:
    job = JobOut.model_validate(checked(response))
    return EnqueueResult(status="created" if response.status_code == 201 else "exists", job=job)


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def _item_json(item: Mapping[str, Any] | BatchItem) -> str:
    if isinstance(item, BatchItem):
        return _ENCODE(item.model_dump(mode="json", exclude_unset=True))
    if all(k in _PLAIN_KEYS for k in item) and "id" in item:
        try:  # the common case ({"id", "data"} of JSON values): no model per item
            return _ENCODE(dict(item))
        except (TypeError, ValueError):  # not plain JSON: the model converts or refuses
            pass
    return _ENCODE(BatchItem.model_validate(item).model_dump(mode="json", exclude_unset=True))


_PLAIN_KEYS = frozenset({"id", "data", "priority", "weight", "critical", "correlation_key",
                         "ordering_key", "timeout_seconds", "timezone"})


def batch_calls(queue: str, jobs: Iterable[Mapping[str, Any] | BatchItem], *,
                max_bytes: int) -> Iterator[tuple[Call, int]]:
    """``POST /v1/jobs/{queue}/batch`` calls of at most 10,000 jobs and about
    ``max_bytes`` each, with the number of jobs in each."""
    chunk: list[str] = []
    size = 0
    for item in jobs:
        text = _item_json(item)
        if chunk and (len(chunk) >= MAX_BATCH or size + len(text) + 1 > max_bytes):
            yield _batch_call(queue, chunk), len(chunk)
            chunk, size = [], 0
        chunk.append(text)
        size += len(text.encode()) + 1
    if chunk:
        yield _batch_call(queue, chunk), len(chunk)


def _batch_call(queue: str, items: list[str]) -> Call:
    content = ('{"jobs":[' + ",".join(items) + "]}").encode()
    return Call(method="POST", path=f"/v1/jobs/{queue}/batch", content=content)


def batch_results(response: httpx.Response, count: int) -> list[BatchResult]:
    results = [BatchResult.model_validate(r) for r in checked(response)["jobs"]]
    if len(results) != count:
        raise ApiStatusError(response.status_code, "bad_answer",
                        f"the batch answer has {len(results)} results for {count} jobs")
    return results

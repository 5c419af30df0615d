"""``hipq.client.Client``: the blocking client (httpx.Client underneath)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self

import httpx

from hipq.api.models import ArchivedPage, BatchResult, JobOut, QueueOut, StatsOut
from hipq.api.schedule_models import ScheduleOut
from hipq.bodies import BatchItem
from hipq.client import _calls
from hipq.client._core import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_PAGE_SIZE,
    DEFAULT_TIMEOUT,
    Call,
    EnqueueResult,
    Retrying,
    RetryPolicy,
    batch_calls,
    batch_results,
    checked,
    enqueue_call,
    enqueue_result,
)


class Client:
    """A blocking client of a hipq daemon's API (README.md, "From another service").
    Use it as a context manager or call :meth:`close`."""

    def __init__(self, base_url: str, token: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, *, retry: RetryPolicy | None = None,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                  timeout=timeout, transport=transport)
        self._retry = retry or RetryPolicy()
        self._max_batch_bytes = max_batch_bytes
        self._sleep = sleep

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call) -> httpx.Response:
        state = Retrying(self._retry, call, time.monotonic())
        while True:
            try:
                response = self._http.request(call.method, call.path, **call.request_kwargs())
            except httpx.TransportError as exc:
                delay = state.after_error(exc, time.monotonic())
                if delay is None:
                    raise
            else:
                delay = state.after_response(response, time.monotonic())
                if delay is None:
                    return response
            self._sleep(delay)

    def _json(self, call: Call) -> Any:
        return checked(self._send(call))

    # -- queues ---------------------------------------------------------------------

    def create_queue(self, id: str, **settings: Any) -> QueueOut:
        return QueueOut.model_validate(self._json(_calls.create_queue(id, settings)))

    def get_queue(self, queue: str) -> QueueOut:
        return QueueOut.model_validate(self._json(_calls.get_queue(queue)))

    def pause(self, queue: str) -> QueueOut:
        return QueueOut.model_validate(self._json(_calls.pause(queue)))

    def resume(self, queue: str) -> QueueOut:
        return QueueOut.model_validate(self._json(_calls.resume(queue)))

    # -- jobs -----------------------------------------------------------------------

    def enqueue(self, queue: str, id: str, data: Mapping[str, Any] | None = None,
                **fields: Any) -> EnqueueResult:
        return enqueue_result(self._send(enqueue_call(queue, id, data, fields)))

    def enqueue_many(self, queue: str,
                     jobs: Iterable[Mapping[str, Any] | BatchItem]) -> list[BatchResult]:
        """Any number of jobs (``{"id", "data", ...}`` each), sent in chunks of the
        API's batch limit; one result per job, in order."""
        out: list[BatchResult] = []
        for call, count in batch_calls(queue, jobs, max_bytes=self._max_batch_bytes):
            out += batch_results(self._send(call), count)
        return out

    def get_job(self, queue: str, id: str) -> JobOut:
        return JobOut.model_validate(self._json(_calls.get_job(queue, id)))

    def cancel(self, queue: str, id: str) -> JobOut:
        return JobOut.model_validate(self._json(_calls.cancel(queue, id)))

    def replay(self, queue: str, id: str) -> JobOut:
        return JobOut.model_validate(self._json(_calls.replay(queue, id)))

    def list_jobs(self, queue: str, state: str = "queued", *,
                  page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[JobOut]:
        """The live jobs of ``queue`` in ``state`` (queued|running), page after page."""
        return self._pages(lambda cursor: _calls.live_page(queue, state, page_size, cursor))

    def archived(self, queue: str | None = None, status: str | None = None, *,
                 page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[JobOut]:
        """Finished jobs, newest first, page after page."""
        return self._pages(lambda cursor: _calls.archived_page(queue, status, page_size, cursor))

    def _pages(self, page: Callable[[str | None], Call]) -> Iterator[JobOut]:
        cursor: str | None = None
        while True:
            answer = ArchivedPage.model_validate(self._json(page(cursor)))
            yield from answer.jobs
            if answer.next_cursor is None:
                return
            cursor = answer.next_cursor

    # -- operations -----------------------------------------------------------------

    def stats(self) -> StatsOut:
        return StatsOut.model_validate(self._json(_calls.stats()))

    def schedules(self) -> list[ScheduleOut]:
        return [ScheduleOut.model_validate(s) for s in self._json(_calls.schedules())["schedules"]]

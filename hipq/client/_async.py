"""``hipq.client.AsyncClient``: the asyncio client (httpx.AsyncClient underneath),
with the same methods as :class:`~hipq.client.Client`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
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
from hipq.clock import Clock, SystemClock


class AsyncClient:
    """An asyncio client of a hipq daemon's API (README.md, "From another service"): ``async with
    AsyncClient(url, token) as hipq: await hipq.enqueue(...)``."""

    def __init__(self, base_url: str, token: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, *, retry: RetryPolicy | None = None,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
                 transport: httpx.AsyncBaseTransport | None = None,
                 clock: Clock | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers,
                                       timeout=timeout, transport=transport)
        self._retry = retry or RetryPolicy()
        self._max_batch_bytes = max_batch_bytes
        self._clock: Clock = clock or SystemClock()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call) -> httpx.Response:
        state = Retrying(self._retry, call, time.monotonic())
        while True:
            try:
                response = await self._http.request(call.method, call.path,
                                                    **call.request_kwargs())
            except httpx.TransportError as exc:
                delay = state.after_error(exc, time.monotonic())
                if delay is None:
                    raise
            else:
                delay = state.after_response(response, time.monotonic())
                if delay is None:
                    return response
            await self._clock.sleep(delay)

    async def _json(self, call: Call) -> Any:
        return checked(await self._send(call))

    # -- queues ---------------------------------------------------------------------

    async def create_queue(self, id: str, **settings: Any) -> QueueOut:
        return QueueOut.model_validate(await self._json(_calls.create_queue(id, settings)))

    async def get_queue(self, queue: str) -> QueueOut:
        return QueueOut.model_validate(await self._json(_calls.get_queue(queue)))

    async def pause(self, queue: str) -> QueueOut:
        return QueueOut.model_validate(await self._json(_calls.pause(queue)))

    async def resume(self, queue: str) -> QueueOut:
        return QueueOut.model_validate(await self._json(_calls.resume(queue)))

    # -- jobs -----------------------------------------------------------------------

    async def enqueue(self, queue: str, id: str,
                      data: Mapping[str, Any] | None = None, **fields: Any) -> EnqueueResult:
        return enqueue_result(await self._send(enqueue_call(queue, id, data, fields)))

    async def enqueue_many(self, queue: str,
                           jobs: Iterable[Mapping[str, Any] | BatchItem]) -> list[BatchResult]:
        """Any number of jobs, sent in chunks of the API's batch limit; one result
        per job, in order."""
        out: list[BatchResult] = []
        for call, count in batch_calls(queue, jobs, max_bytes=self._max_batch_bytes):
            out += batch_results(await self._send(call), count)
        return out

    async def get_job(self, queue: str, id: str) -> JobOut:
        return JobOut.model_validate(await self._json(_calls.get_job(queue, id)))

    async def cancel(self, queue: str, id: str) -> JobOut:
        return JobOut.model_validate(await self._json(_calls.cancel(queue, id)))

    async def replay(self, queue: str, id: str) -> JobOut:
        return JobOut.model_validate(await self._json(_calls.replay(queue, id)))

    def list_jobs(self, queue: str, state: str = "queued", *,
                  page_size: int = DEFAULT_PAGE_SIZE) -> AsyncIterator[JobOut]:
        """The live jobs of ``queue`` in ``state`` (queued|running): ``async for``."""
        return self._pages(lambda cursor: _calls.live_page(queue, state, page_size, cursor))

    def archived(self, queue: str | None = None, status: str | None = None, *,
                 page_size: int = DEFAULT_PAGE_SIZE) -> AsyncIterator[JobOut]:
        """Finished jobs, newest first: ``async for``."""
        return self._pages(lambda cursor: _calls.archived_page(queue, status, page_size, cursor))

    async def _pages(self, page: Callable[[str | None], Call]) -> AsyncIterator[JobOut]:
        cursor: str | None = None
        while True:
            answer = ArchivedPage.model_validate(await self._json(page(cursor)))
            for job in answer.jobs:
                yield job
            if answer.next_cursor is None:
                return
            cursor = answer.next_cursor

    # -- operations -----------------------------------------------------------------

    async def stats(self) -> StatsOut:
        return StatsOut.model_validate(await self._json(_calls.stats()))

    async def schedules(self) -> list[ScheduleOut]:
        answer = await self._json(_calls.schedules())
        return [ScheduleOut.model_validate(s) for s in answer["schedules"]]

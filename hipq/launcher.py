"""Step 5 of the reconcile loop: launching, and recording what launches said.

Each job of a new batch is sent through its queue's target in a background task,
at most ``concurrency`` at a time, so a slow target never holds up a tick. When
launches finish, their results are recorded in batches, one transaction each:
the launches are marked confirmed, and outcomes a target gave at once (a Python
function's result, a ``sync`` HTTP answer, a launch error) are written to the
response inbox, where the next tick applies them like any other response.

Failure modes: a crash before a launch is recorded leaves the try unconfirmed (the
next owner fails it as ``lost``); a database error while recording keeps the
results in memory and retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from hipq.clock import Clock
from hipq.errors import HipqError, LaunchError
from hipq.jobs import ErrorKind, Job, JobError
from hipq.store import Response, SQLStore
from hipq.targets import Accepted, Completed, LaunchOutcome, Target

log = logging.getLogger(__name__)

RECORD_RETRY_SECONDS = 0.5


@dataclass(slots=True)
class LaunchResult:
    job: Job
    outcome: LaunchOutcome | None  # None: the launch raised
    error: JobError | None = None


class Launcher:
    def __init__(self, store: SQLStore, *, clock: Clock, owner: str, concurrency: int,
                 on_wake: Callable[[], None] | None = None) -> None:
        self.store = store
        self.clock = clock
        self.owner = owner
        self.on_wake = on_wake
        self._slots = asyncio.Semaphore(concurrency)
        self._inflight: set[asyncio.Task[None]] = set()
        self._results: list[LaunchResult] = []
        self._flush_lock = asyncio.Lock()

    def launch(self, target: Target, job: Job) -> None:
        """Send ``job`` in the background."""
        self._spawn(self._launch_one(target, job))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _launch_one(self, target: Target, job: Job) -> None:
        async with self._slots:
            try:
                outcome: LaunchOutcome | None = await target.launch(job.snapshot())
                error = None
            except LaunchError as exc:
                outcome, error = None, JobError(kind=exc.kind, detail=str(exc),
                                                retryable=exc.retryable)
            except Exception as exc:
                outcome, error = None, JobError(kind=ErrorKind.TRANSPORT, detail=repr(exc)[:1000])
        self._results.append(LaunchResult(job=job, outcome=outcome, error=error))
        if len(self._results) == 1:  # the first result since the last flush schedules one
            asyncio.get_running_loop().call_soon(lambda: self._spawn(self.flush()))

    async def flush(self) -> None:
        """Record finished launches: confirmations and immediate outcomes, one
        transaction. Failed launches go to the inbox as failed responses."""
        async with self._flush_lock:
            results, self._results = self._results, []
            if not results:
                return
            confirm = [(r.job.queue, r.job.id, r.job.attempt) for r in results
                       if r.outcome is not None]
            responses = [launch_response(r) for r in results]
            try:
                await self.store.launch_results_record(
                    confirm=confirm, responses=[x for x in responses if x is not None],
                    owner=self.owner, now=self.clock.now())
            except HipqError:
                log.exception("could not record %d launch results; will retry", len(results))
                self._results[:0] = results
                await self.clock.sleep(RECORD_RETRY_SECONDS)
                self._spawn(self.flush())
                return
        if self.on_wake is not None:
            self.on_wake()

    async def drain(self) -> None:
        """Wait until every launch so far has finished and been recorded."""
        while self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)
        await self.flush()


def launch_response(result: LaunchResult) -> Response | None:
    """The inbox row for a launch's immediate outcome (None: the target accepted
    the job and its outcome comes later)."""
    job = result.job
    key = job.correlation_key or ""
    if result.outcome is None:
        error = result.error or JobError(kind=ErrorKind.TRANSPORT)
        return Response(correlation_key=key, attempt=job.attempt, status="failed",
                        retryable=error.retryable, source="launch",
                        error={"kind": error.kind, "detail": error.detail})
    if isinstance(result.outcome, Accepted):
        return None
    done: Completed = result.outcome
    if done.status == "succeeded":
        return Response(correlation_key=key, attempt=job.attempt, status="succeeded",
                        result=done.result, source="target")
    error_body = done.error if isinstance(done.error, dict) else {"detail": str(done.error or "")}
    return Response(correlation_key=key, attempt=job.attempt, status="failed",
                    retryable=done.retryable, result=done.result, source="target",
                    error={"kind": done.kind, **error_body})

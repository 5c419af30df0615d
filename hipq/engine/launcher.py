"""Step 5 of the reconcile loop: launching, and recording what launches said.

The jobs of a new batch are sent through their queue's target by background
workers, at most ``concurrency`` launches at a time, so a slow target never holds
up a tick. What a launch says is handled by kind:

- the target **accepted** the job (its outcome comes later, as a response): the
  launch is marked confirmed in the database, in batches (one statement per
  flush), so a new owner after a crash waits for the response;
- the target gave an **outcome at once** (a Python function's result, a ``sync``
  HTTP answer) or the launch **failed**: the outcome is handed to the next tick in
  memory (:meth:`Launcher.take_outcomes`) and persisted by its step 3 with the
  job's end or retry, in the same transaction.

Its in-tick mode (:meth:`Launcher.run_in_tick`, :mod:`hipq.engine.inline`) sends a
tick's tries at once and waits for their answers within the tick.

A target with a ``dispatch(job)`` method (the Kafka target) is pipelined: the worker
hands the job over and goes on to the next one; the outcome is recorded when the
future ``dispatch`` returned completes (the target bounds how many are in flight).

Failure modes: a crash before an accepted launch is confirmed, or before an
immediate outcome is persisted, leaves the try unconfirmed: the next owner fails
it as ``lost`` (``at_least_once`` retries it, ``at_most_once`` does not). A
database error while confirming keeps the confirmations in memory and retries.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hipq import tracing
from hipq.clock import Clock
from hipq.engine.requests import InTickRun
from hipq.errors import HipqError, LaunchError
from hipq.jobs import ErrorKind, Job, JobError
from hipq.store import Store
from hipq.targets import ACCEPTED, Accepted, Completed, LaunchOutcome, Target
from hipq.values import json_problem

log = logging.getLogger(__name__)

RECORD_RETRY_SECONDS = 0.5
# how long the first confirmation since the last write waits for others to share its
# statement: under load a write per round trip to the database (a few ms) made small
# statements, each a commit (issue 28); a crash within it leaves those tries
# unconfirmed, as one before the write would
CONFIRM_LINGER_SECONDS = 0.01
_UNKNOWN: Any = object()  # not looked up yet


@dataclass(slots=True)
class LaunchResult:
    job: Job
    outcome: LaunchOutcome | None  # None: the launch raised
    error: JobError | None = None


class Launcher:
    def __init__(self, store: Store, *, clock: Clock, owner: str, concurrency: int,
                 on_wake: Callable[[], None] | None = None,
                 on_answered: Callable[[Job, Callable[[], datetime]], None] | None = None) -> None:
        self.store = store
        self.clock = clock
        self.owner = owner
        self.on_wake = on_wake
        self.on_answered = on_answered  # each launch, when its send finished
        self.concurrency = concurrency  # per target
        # per target: the jobs to send, and the workers sending them (a slow or hung
        # target holds its own workers only: nobody blocks another job's launch)
        self._pending: dict[Target, deque[Job]] = {}
        self._dispatch: dict[Target, Any] = {}  # target -> its dispatch method, or None
        self._workers: dict[Target, int] = {}
        self._inflight: set[asyncio.Task[None]] = set()
        self._sending: set[asyncio.Future[Any]] = set()  # dispatched, not yet answered
        self._confirm: list[tuple[str, str, int]] = []
        self._outcomes: list[LaunchResult] = []
        self._spent: list[tuple[Job, Any]] = []  # accepted launches whose budget is spent
        self._reports: list[tuple[Job, Any]] = []  # accepted launches' rate-limit headers
        self._flush_lock = asyncio.Lock()
        # per queue: launches not yet recorded (confirmed in the database, or their
        # outcome in memory for the next tick); a handover waits for zero
        self._unrecorded: dict[str, int] = {}

    def launch_many(self, launches: Sequence[tuple[Target, Job]]) -> None:
        """Send these jobs in the background, each target's in order, ``concurrency``
        at a time per target (one worker task per slot, not one task per job): a
        target whose sends hang (a Python function that never returns, a downstream
        that answers at its timeout) delays its own jobs, never another target's."""
        pending = self._pending
        for target, job in launches:
            jobs = pending.get(target)
            if jobs is None:
                jobs = pending[target] = deque()
            jobs.append(job)
        unrecorded = self._unrecorded
        for queue, n in Counter([job.queue for _, job in launches]).items():
            unrecorded[queue] = unrecorded.get(queue, 0) + n
        workers = self._workers
        for target, jobs in pending.items():
            running = workers.get(target, 0)
            while running < self.concurrency and running < len(jobs):
                running += 1
                self._spawn(self._worker(target, jobs))
            workers[target] = running

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _worker(self, target: Target, jobs: deque[Job]) -> None:
        try:
            while jobs:
                job = jobs.popleft()
                if job.trace is None:
                    await self._send(target, job)
                else:  # the try's trace context is current while it is sent
                    with tracing.tracer().launching(job):
                        await self._send(target, job)
        finally:
            left = self._workers[target] - 1
            if left:
                self._workers[target] = left
            else:  # the target's last worker: nothing of it is kept
                del self._workers[target]
                if not jobs and self._pending.get(target) is jobs:
                    del self._pending[target]

    async def _send(self, target: Target, job: Job) -> None:
        dispatch = self._dispatch.get(target, _UNKNOWN)
        if dispatch is _UNKNOWN:  # looked up once per target
            dispatch = self._dispatch[target] = getattr(target, "dispatch", None)
        if dispatch is None:
            self._record(await launch_one(target, job))
            return
        try:
            sent: asyncio.Future[Any] = await dispatch(job)
        except Exception as exc:
            self._record(failed_launch(job, exc))
            return
        self._sending.add(sent)
        sent.add_done_callback(functools.partial(self._answered, job))

    def _answered(self, job: Job, done: asyncio.Future[Any]) -> None:
        self._sending.discard(done)
        exc = None if done.cancelled() else done.exception()
        if done.cancelled() or exc is not None:
            error = exc if isinstance(exc, Exception) else RuntimeError("launch cancelled")
            self._record(failed_launch(job, error))
        else:
            self._record(LaunchResult(job=job, outcome=ACCEPTED))

    def _record(self, result: LaunchResult) -> None:
        if self.on_answered is not None:
            self.on_answered(result.job, self.clock.now)
        if isinstance(result.outcome, Accepted):
            if result.outcome.budget:
                self._reports.append((result.job, result.outcome.budget))
            if result.outcome.spent is not None:
                self._spent.append((result.job, result.outcome.spent))
                if self.on_wake is not None:
                    self.on_wake()
            self._confirm.append((result.job.queue, result.job.id, result.job.attempt))
            if len(self._confirm) == 1:  # the first since the last flush schedules one
                self.clock.call_later(CONFIRM_LINGER_SECONDS, lambda: self._spawn(self.flush()))
            return
        self._outcomes.append(result)
        queue, unrecorded = result.job.queue, self._unrecorded  # _recorded(queue), inline
        left = unrecorded.get(queue, 0) - 1
        if left > 0:
            unrecorded[queue] = left
        else:
            unrecorded.pop(queue, None)
        if len(self._outcomes) == 1 and self.on_wake is not None:
            self.on_wake()

    def _recorded(self, queue: str, n: int = 1) -> None:
        left = self._unrecorded.get(queue, 0) - n
        if left > 0:
            self._unrecorded[queue] = left
        else:
            self._unrecorded.pop(queue, None)

    # -- in-tick runs (hipq.engine.inline): a launch mode ------------------------------

    async def run_in_tick(self, target: Target, tries: Sequence[Job], *, wait: float,
                          concurrency: int) -> InTickRun:
        """Send ``tries`` (:func:`hipq.engine.inline.try_of`) through ``target`` now,
        ``concurrency`` at a time, beside the workers; wait until all have answered or
        ``wait`` seconds have passed. A try answered after the wait is recorded as if a
        worker had sent it; one started and not answered is expected (:meth:`busy`)."""
        run = _InTick(target=target, pending=deque(tries), launcher=self)
        if not tries:
            return run.close()
        for _ in range(min(concurrency, len(tries))):  # drain() waits for them
            self._spawn(run.work())
        timer = self.clock.call_later(wait, run.done.set)
        try:
            await run.done.wait()
        finally:
            timer.cancel()
            answers = run.close()
        return answers

    def hand_on(self, results: Sequence[LaunchResult]) -> None:
        """Answers of an in-tick run that go the usual way, as if one of the workers
        had sent their tries after the claim."""
        self.expect([r.job for r in results])
        for result in results:
            self._record(result)

    def expect(self, jobs: Sequence[Job]) -> None:
        """Launches under way whose answers will come through :meth:`_record`."""
        unrecorded = self._unrecorded
        for queue, n in Counter([job.queue for job in jobs]).items():
            unrecorded[queue] = unrecorded.get(queue, 0) + n

    def busy(self, queue: str) -> bool:
        """Whether launches of ``queue`` are in flight or not yet recorded."""
        return queue in self._unrecorded

    def take_spent(self) -> list[tuple[Job, Any]]:
        """Accepted launches whose partner said its budget is spent (with the reset),
        since the last call."""
        out, self._spent = self._spent, []
        return out

    def take_reports(self) -> list[tuple[Job, Any]]:
        """Accepted launches whose answer carried rate-limit headers (the headers),
        since the last call."""
        out, self._reports = self._reports, []
        return out

    def take_outcomes(self) -> list[LaunchResult]:
        """The immediate outcomes (and failed launches) since the last call."""
        out, self._outcomes = self._outcomes, []
        return out

    async def flush(self) -> None:
        """Mark the accepted launches so far confirmed (one statement)."""
        async with self._flush_lock:
            confirm, self._confirm = self._confirm, []
            if not confirm:
                return
            try:
                await self.store.job_confirm_launch_many(keys=confirm, owner=self.owner)
                for queue, n in Counter(queue for queue, _, _ in confirm).items():
                    self._recorded(queue, n)
            except HipqError:
                log.exception("could not confirm %d launches; will retry", len(confirm))
                self._confirm[:0] = confirm
                await self.clock.sleep(RECORD_RETRY_SECONDS)
                self._spawn(self.flush())
                return

    async def drain(self) -> None:
        """Wait until every launch so far has finished and its confirmation has
        been recorded (immediate outcomes wait in memory for the next tick)."""
        while self._inflight or self._sending:
            await asyncio.gather(*list(self._inflight), *list(self._sending),
                                 return_exceptions=True)
            await asyncio.sleep(0)  # noqa: TID251 (let the done callbacks run)
        await self.flush()


@dataclass(slots=True, eq=False)
class _InTick:
    """One in-tick run's tries, sent by a few tasks; answers within the wait are kept
    for the tick, later ones go the usual way."""

    target: Target
    pending: deque[Job]
    launcher: Launcher
    answered: list[LaunchResult] = field(default_factory=list)
    started: dict[str, Job] = field(default_factory=dict)  # by id, until answered
    open: bool = True
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def work(self) -> None:
        target, pending = self.target, self.pending
        while pending:
            job = pending.popleft()
            self.started[job.id] = job
            if job.trace is None:
                result = await _launch_owned(target, job)
            else:  # the try's trace context is current while it runs
                with tracing.tracer().launching(job):
                    result = await _launch_owned(target, job)
            if self.open:
                del self.started[job.id]
                self.answered.append(result)
                if not pending and not self.started:
                    self.done.set()
            else:  # the wait is over: the answer goes the usual way
                self.launcher._record(result)

    def close(self) -> InTickRun:
        """End the wait: what was not started stays for the usual path; what was
        started and not answered is expected by the launcher (in the same step, so
        no answer can come in between)."""
        self.open = False
        unstarted = list(self.pending)
        self.pending.clear()
        unanswered = list(self.started.values())
        self.launcher.expect(unanswered)
        return InTickRun(answered=self.answered, unanswered=unanswered, unstarted=unstarted)


async def _launch_owned(target: Target, job: Job) -> LaunchResult:
    """:func:`launch_one` of a try that is its own copy (no second snapshot where the
    target can take one as it is)."""
    owned = getattr(target, "launch_owned", None)
    if owned is None:
        return await launch_one(target, job)
    try:
        outcome: LaunchOutcome = await owned(job)
    except Exception as exc:
        return failed_launch(job, exc)
    return launch_result(job, outcome)


async def launch_one(target: Target, job: Job) -> LaunchResult:
    """Send one job; what the target said, or the error it raised."""
    try:
        outcome: LaunchOutcome = await target.launch(job)
    except Exception as exc:
        return failed_launch(job, exc)
    return launch_result(job, outcome)


def launch_result(job: Job, outcome: object) -> LaunchResult:
    """What a target answered, as the try's launch result. An answer no store can
    hold (a Python function's result or error with a set, bytes, a datetime, NaN,
    a NUL character...: docs/configuration.md, an error in a plugin) fails the try, not
    retryable, since running it again would hand back the same; without this check
    the tick's one transaction would fail at every tick, for every job."""
    if isinstance(outcome, Completed):
        problem = ((None if outcome.result is None else json_problem(outcome.result))
                   or (None if outcome.error is None else json_problem(outcome.error)))
        if problem is None:
            return LaunchResult(job=job, outcome=outcome)
        detail = f"the target's answer cannot be stored: {problem}"
    elif isinstance(outcome, Accepted):
        return LaunchResult(job=job, outcome=outcome)
    else:
        detail = f"the target answered a {type(outcome).__name__}, not an outcome"
    return LaunchResult(job=job, outcome=None,
                        error=JobError(kind=ErrorKind.PLUGIN, detail=detail, retryable=False))


def failed_launch(job: Job, exc: Exception) -> LaunchResult:
    """A launch that raised: a :class:`LaunchError` keeps its kind, anything else is a
    retryable ``transport`` failure."""
    if isinstance(exc, LaunchError):
        error = JobError(kind=exc.kind, detail=str(exc), retryable=exc.retryable)
    else:
        error = JobError(kind=ErrorKind.TRANSPORT, detail=repr(exc)[:1000])
    return LaunchResult(job=job, outcome=None, error=error)

"""In-tick runs: a try of a Python target with ``in_tick: true`` that ends within its
tick is claimed and ended in one statement, with no ``running`` row in between.

Step 4 persists a new batch as running before step 5 launches it, so that after a
crash the next owner knows what was sent. For a function that runs inside hipq and
returns within milliseconds, that record costs the database more than the rest of
the job. So, for such a queue (:func:`eligible`), step 4 runs the selected jobs
first, waits at most ``reconcile.in_tick_seconds`` for them, and then:

- a try that succeeded is archived from ``queued`` in one statement
  (:meth:`~hipq.store.base.Store.job_archive_ran_many`), as if claimed and ended
  in the same instant (its attempt, launch time, deadline and key as a claim sets
  them; the try is recorded in the history);
- every other try (a failure for the retry strategy, an accepted launch, a
  function still running, a throttled or spent answer) is claimed as usual and
  its answer goes through the launcher (:meth:`Launcher.record`), as if the launch
  had happened after the claim; the jobs not started when the wait ended are
  claimed and launched the usual way.

What the queue gives up, and why it is opt-in: while its function runs the job is
still ``queued`` in the database (for milliseconds). A crash in that window leaves
it queued: it runs again as the same attempt, and the crash spends no attempt (a
try claimed first would end as ``lost`` and count), so a job that kills the
daemon every time it runs is never given up. ``at_most_once`` queues never run in
their tick, nor queues whose launches must be counted or watched as they happen
(a rate limit, merging by ordering key, the partner's word: SPEC 15).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hipq import tracing
from hipq.engine.launcher import (
    Launcher,
    LaunchResult,
    failed_launch,
    launch_one,
    launch_result,
)
from hipq.frozen import evolver
from hipq.jobs import Job, JobState, json_copy
from hipq.spec import QueueSpec
from hipq.targets import Completed, LaunchOutcome, Target

# a try of a queued job: the job as fetched, as step 4's claim would mark it, with its
# own copies of the JSON values (what Job.snapshot gives a function, in one copy)
_try = evolver(Job, ("status", "attempt", "correlation_key", "deadline", "launched_at",
                     "owner", "launch_confirmed", "updated_at", "data", "result", "error",
                     "time_windows"))


def eligible(spec: QueueSpec, target: Target | None, *, listening: bool) -> bool:
    """Whether a queue's tries may run within their tick (see the module doc)."""
    return (target is not None and getattr(target, "in_tick", False)
            and spec.delivery_strategy == "at_least_once" and spec.rate_limit is None
            and not spec.merge_by_ordering_key and not listening)


def try_of(job: Job, *, now: datetime, owner: str, heartbeat_seconds: float | None,
           deadlines: dict[float, datetime] | None = None) -> Job:
    """The queued ``job`` as step 4 would claim it (see ``claim`` in postgres.sql),
    as a deep copy (:meth:`Job.snapshot`): the function may change it freely.
    ``deadlines``: the deadline of each timeout at ``now``, filled as met (the tries
    of a tick share a few timeouts, and a timedelta costs more than the rest)."""
    attempt = job.attempt + 1
    timeout = job.timeout_seconds
    if heartbeat_seconds is not None and timeout >= heartbeat_seconds:
        timeout = heartbeat_seconds
    known = None if deadlines is None else deadlines.get(timeout)
    if known is not None:
        deadline = known
    else:
        deadline = now + timedelta(seconds=timeout)
        if deadlines is not None:
            deadlines[timeout] = deadline
    key = job.correlation_key if job.correlation_fixed else f"~{job.token}.{attempt}"
    result, error, windows = job.result, job.error, job.time_windows
    return _try(job, JobState.RUNNING, attempt, key, deadline, now,
                owner, False, now, json_copy(job.data),
                None if result is None else json_copy(result),
                None if error is None else json_copy(error),
                None if windows is None else json_copy(windows))


async def _launch(target: Target, job: Job) -> LaunchResult:
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


def archivable(result: LaunchResult) -> bool:
    """A try whose end step 3 would persist as a plain success, with nothing else to
    tell (no budget spent)."""
    outcome = result.outcome
    return (type(outcome) is Completed and outcome.status == "succeeded"
            and outcome.spent is None)


@dataclass(slots=True)
class InlineRun:
    """What one in-tick run gave: the answers within the wait (in the order they
    came), the jobs started and not answered (their answers go to the launcher),
    and the jobs not started."""

    answered: list[LaunchResult] = field(default_factory=list)
    unanswered: list[Job] = field(default_factory=list)
    unstarted: list[Job] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class _Run:
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
                result = await _launch(target, job)
            else:  # the try's trace context is current while it runs
                with tracing.tracer().launching(job):
                    result = await _launch(target, job)
            if self.open:
                del self.started[job.id]
                self.answered.append(result)
                if not pending and not self.started:
                    self.done.set()
            else:  # the wait is over: the answer goes the usual way
                self.launcher.record(result)

    def close(self) -> InlineRun:
        """End the wait: what was not started stays for the usual path; what was
        started and not answered is expected by the launcher (in the same step, so
        no answer can come in between)."""
        self.open = False
        unstarted = list(self.pending)
        self.pending.clear()
        unanswered = list(self.started.values())
        self.launcher.expect(unanswered)
        return InlineRun(answered=self.answered, unanswered=unanswered, unstarted=unstarted)


async def run_inline(launcher: Launcher, target: Target, jobs: Sequence[Job], *,
                     wait: float, concurrency: int) -> InlineRun:
    """Run ``jobs`` (tries, see :func:`try_of`) through ``target`` now,
    ``concurrency`` at a time; wait until all have answered or ``wait`` seconds
    have passed."""
    run = _Run(target=target, pending=deque(jobs), launcher=launcher)
    if not jobs:
        return run.close()
    for _ in range(min(concurrency, len(jobs))):  # the launcher's drain waits for them
        launcher.spawn(run.work())
    try:
        if not run.done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.done.wait(), wait)
    finally:
        answers = run.close()
    return answers

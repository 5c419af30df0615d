"""In-tick runs: a try of a Python target with ``in_tick: true`` that ends within its
tick is claimed and ended in one statement, with no ``running`` row in between.

Step 4 persists a new batch as running before step 5 launches it, so that after a
crash the next owner knows what was sent. For a function that runs inside hipq and
returns within milliseconds, that record costs the database more than the rest of
the job. So, for such a queue (:func:`eligible`), step 4 runs the selected jobs
first, waits at most ``reconcile.in_tick_seconds`` for them, and then:

- a try that succeeded is an ordinary archive change (:func:`ends_of`), and the
  store claims and archives it from ``queued`` in one call
  (:meth:`~hipq.store.base.Store.job_archive_ran_many`: one statement on
  PostgreSQL, one transaction on SQLite), as if claimed and ended in the same
  instant (its attempt, launch time, deadline and key as a claim sets them; the
  try is recorded in the history);
- every other try (a failure for the retry strategy, an accepted launch, a
  function still running, a throttled or spent answer) is claimed as usual and
  its answer goes through the launcher (:meth:`Launcher.hand_on`), as if the launch
  had happened after the claim; the jobs not started when the wait ended are
  claimed and launched the usual way.

The run itself is the launcher's (:meth:`Launcher.run_in_tick`, a launch mode);
this module is the pure part the tick's plan uses (:meth:`TickPlan.claim`).

What the queue gives up, and why it is opt-in: while its function runs the job is
still ``queued`` in the database (for milliseconds). A crash in that window leaves
it queued: it runs again as the same attempt, and the crash spends no attempt (a
try claimed first would end as ``lost`` and count), so a job that kills the
daemon every time it runs is never given up. ``at_most_once`` queues never run in
their tick, nor queues whose launches must be counted or watched as they happen
(a rate limit, merging by ordering key, the partner's word: docs/throttling.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from hipq.frozen import evolver
from hipq.jobs import Job, JobState, json_copy
from hipq.spec import QueueSpec
from hipq.store.records import Change, ChangeKind
from hipq.targets.interface import Completed, Target

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


def archivable(result: Any) -> bool:
    """A try (its ``LaunchResult``) whose end step 3 would persist as a plain success,
    with nothing else to tell (no budget spent)."""
    outcome = result.outcome
    return (type(outcome) is Completed and outcome.status == "succeeded"
            and outcome.spent is None)


def ends_of(answered: Sequence[Any], now: datetime) -> tuple[list[Change], list[Any]]:
    """The answers of an in-tick run (``LaunchResult``s) as ordinary archive changes
    of the plain successes, and the other answers (they go the usual way)."""
    ends: list[Change] = []
    other: list[Any] = []
    archive, succeeded = ChangeKind.ARCHIVE, JobState.SUCCEEDED.value
    for result in answered:
        if archivable(result):
            job = result.job
            ends.append(Change(
                kind=archive, queue=job.queue, id=job.id, attempt=job.attempt,
                launched_at=now, correlation_key=job.correlation_key, status=succeeded,
                result=getattr(result.outcome, "result", None), outcome=succeeded,
                trace=job.trace))
        else:
            other.append(result)
    return ends, other


def in_order(candidates: Mapping[str, Job], ids: Iterable[str]) -> list[Job]:
    """The candidates of ``ids``, in the order read."""
    wanted = set(ids)
    return [job for i, job in candidates.items() if i in wanted]

"""The reconcile loop's decisions, as pure functions: no I/O, no clock, no state.

- :func:`plan_fetch`: which bounded reads of due jobs a queue needs this tick;
- :func:`sift_decision`: a throttler's answer, kept to the candidates it was given;
- :func:`inbox_verdict` / :func:`extended_deadline`: what a response does to a try;
- ``outcome_*``: how a try ended, from a target's answer, a response, a deadline;
- :func:`change_for`: an ended (or extended) try -> the :class:`Change` step 3
  persists, with the retry strategy's verdict.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from hipq.engine.held import HeldTry, Outcome
from hipq.jobs import (
    ErrorKind,
    Job,
    JobError,
    JobState,
    Ordering,
    ResponseStatus,
    cancelled_error,
    dropped_error,
    lost_error,
    timeout_error,
)
from hipq.plugins import GiveUp, Retry, RetryContext, ThrottleResult
from hipq.retry import RetryFn, decide
from hipq.spec import QueueSpec
from hipq.store.records import Change, ChangeKind, InboxOutcome, InboxRow
from hipq.targets.interface import Completed, LaunchOutcome
from hipq.throttling import DEFAULT_GROUP, QuotaPlan, RunningUsage

_SUCCEEDED, _CANCELLED = JobState.SUCCEEDED.value, JobState.CANCELLED.value  # plain str


# -- steps 1 and 2: what to fetch, what the throttler may decide ----------------------


@dataclass(frozen=True, slots=True)
class Fetch:
    """One bounded read of due jobs (``ordering=None``: the queue's own order)."""

    limit: int
    ordering: Ordering | None = None
    critical_only: bool = False
    group: str | None = None
    default_group_excluding: tuple[str, ...] | None = None


def _free(capacity: int | None, used: int, limit: int) -> int:
    """Weight units still free (``limit`` when the capacity is unlimited)."""
    if capacity is None:
        return limit
    return max(min(capacity - used, limit), 0)


def plan_fetch(spec: QueueSpec, used: RunningUsage, limit: int, *,
               widen: bool = False) -> list[Fetch]:
    """Due candidates bounded by what could launch: free capacity (per quota group
    when the queue has quotas), plus critical jobs, plus the oldest due jobs when
    aging may promote them. Results are merged in this order. ``widen``: look as far
    as ``limit`` (some groups are paused by their partner)."""
    normal_free = _free(spec.concurrency, used.normal_weight, limit)
    critical_free = _free(spec.critical_concurrency, used.critical_weight, limit)
    # with a per-group rate limit (or group pauses), the first jobs in order may all
    # belong to groups that cannot launch: look further so they do not hide the others
    wide = limit if widen or (spec.rate_limit is not None and spec.rate_limit.by) else 0
    plan: list[Fetch] = []
    if normal_free > 0:
        if spec.quotas is not None and spec.concurrency is not None:
            plan.extend(_group_fetches(spec, used, normal_free, wide))
        else:
            plan.append(Fetch(limit=max(normal_free, wide)))
        if spec.aging_seconds and spec.ordering is Ordering.PRIORITY_THEN_TIME:
            plan.append(Fetch(limit=normal_free, ordering=Ordering.TIME_THEN_PRIORITY))
    if critical_free > 0:
        plan.append(Fetch(limit=critical_free, critical_only=True))
    return plan


def _group_fetches(spec: QueueSpec, used: RunningUsage, free: int,
                   wide: int) -> list[Fetch]:
    """One fetch per quota group that has room (every group may borrow when the
    queue lends unused quota), so one group's backlog never hides the others."""
    assert spec.quotas is not None
    assert spec.concurrency is not None
    assert used.field_path == spec.quotas.field, "usage by another field than the quotas'"
    plan = QuotaPlan.of_values(spec.quotas, spec.concurrency, used.field_weights)
    listed = tuple(sorted(spec.quotas.shares))
    out = []
    for group in [*listed, DEFAULT_GROUP]:
        room = free if spec.quotas.lend_unused else min(plan.free(group), free)
        if room <= 0:
            continue
        room = max(room, wide)
        if group == DEFAULT_GROUP:
            out.append(Fetch(limit=room, default_group_excluding=listed))
        else:
            out.append(Fetch(limit=room, group=group))
    return out


def unique_jobs(batches: Iterable[Sequence[Job]]) -> list[Job]:
    """The jobs of several fetches, in order, each once."""
    seen: set[str] = set()
    jobs = []
    for batch in batches:
        for job in batch:
            if job.id not in seen:
                seen.add(job.id)
                jobs.append(job)
    return jobs


@dataclass(frozen=True, slots=True)
class Sifted:
    launch: list[str]
    reschedule: dict[str, datetime]
    drop: dict[str, str]


def sift_decision(candidates: Sequence[Job], decision: ThrottleResult) -> Sifted:
    """Keep a throttler's decision to the candidates it was offered: launch wins
    over reschedule, which wins over drop; repeats count once."""
    known = {j.id for j in candidates}
    launch: list[str] = []
    chosen: set[str] = set()
    for job in decision.launch:
        if job.id in known and job.id not in chosen:
            chosen.add(job.id)
            launch.append(job.id)
    reschedule = {i: at for i, at in decision.reschedule.items()
                  if i in known and i not in chosen}
    drop = {i: r for i, r in decision.drop.items()
            if i in known and i not in chosen and i not in reschedule}
    return Sifted(launch=launch, reschedule=reschedule, drop=drop)


def held_reasons(candidates: Sequence[Job], decision: ThrottleResult,
                 launched: Sequence[str], counts: Mapping[str, int], *,
                 trusted: bool = False) -> dict[str, int]:
    """The candidates a tick held back, counted by reason (docs/throttling.md), added to
    ``counts``: the throttler's reason for each (``window`` for the built-in's
    reschedules), ``throttler`` where it gave none. O(candidates). ``trusted``: the
    built-in throttler, whose reasons name exactly the candidates it neither
    launched nor dropped (counted at C speed)."""
    out = dict(counts)
    reasons, drop = decision.held, decision.drop
    if trusted and not drop:
        for reason, n in Counter(reasons.values()).items():
            out[reason] = out.get(reason, 0) + n
        rest = len(candidates) - len(launched) - len(reasons)
        if rest > 0:
            out["throttler"] = out.get("throttler", 0) + rest
        return out
    chosen = set(launched)
    for job in candidates:
        job_id = job.id
        if job_id in chosen or job_id in drop:
            continue
        reason = reasons.get(job_id, "throttler")
        out[reason] = out.get(reason, 0) + 1
    return out


def drop_ends(drop: Mapping[str, str]) -> dict[str, tuple[str, Any]]:
    """Dropped candidates -> (terminal state, error): ``expired`` for the reason
    "expired", else ``failed``."""
    return {i: (JobState.EXPIRED.value if reason == "expired" else JobState.FAILED.value,
                dropped_error(reason).to_json()) for i, reason in drop.items()}


# -- step 0: outcomes and responses ---------------------------------------------------


def outcome_timeout(deadline: datetime) -> Outcome:
    return Outcome(status=JobState.FAILED, error=timeout_error(deadline))


def outcome_lost() -> Outcome:
    return Outcome(status=JobState.FAILED, error=lost_error())


# The key of a throttled or timed-out try's error data that says whether the partner
# said it, so may act beyond its job: pause its scope, lower the adaptive limit
# (docs/throttling.md, "Who may pause, and for how long"). Set here on every such
# error made from an answer, over whatever the answer held.
FROM_PARTNER = "from_partner"
_BEYOND_THE_JOB = frozenset({ErrorKind.THROTTLED.value, ErrorKind.TIMEOUT.value})


def said_by_partner(row: InboxRow) -> bool:
    """Whether a response is the partner's own word: a Kafka response (applied only
    to the running try it matches) or one on the try's signed callback URL (it
    carries the try's token). Not one sent with an API token (the status route
    ``POST /v1/jobs/{queue}/{id}``, the templated ``/v1/inbox/{queue}``, the Python
    API): a producer names its own job's group, so its word pauses nothing."""
    return row.source == "kafka" or (row.source == "http" and row.token is not None)


def may_pause(error: JobError) -> bool:
    """Whether a throttled try's error is the partner's word (pauses its scope and
    is learned from), not a producer's (gives back its own try only)."""
    data = error.data
    return isinstance(data, dict) and data.get(FROM_PARTNER) is True


def may_slow_down(error: JobError) -> bool:
    """Whether a timed-out try lowers the adaptive limit: hipq's own deadline passed
    (:func:`outcome_timeout`: no data), or the partner said so; not a producer's
    ``failed`` status of kind ``timeout``."""
    return error.data is None or may_pause(error)


def _said(kind: str, data: dict[str, Any], *, partner: bool) -> dict[str, Any]:
    """A failed answer's error data; one of kind ``throttled`` or ``timeout`` (which
    act beyond the job) says who said it, whatever it held under that key."""
    return {**data, FROM_PARTNER: partner} if kind in _BEYOND_THE_JOB else data


def outcome_from_launch(outcome: LaunchOutcome | None, error: JobError | None) -> Outcome:
    """A target's immediate answer (``outcome``), or the error its launch raised."""
    if outcome is None:
        error = error or JobError(kind=ErrorKind.TRANSPORT)
        data = {"kind": error.kind, "detail": error.detail}
        return Outcome(status=JobState.FAILED, response={"source": "launch"},
                       error=replace(error, data=_said(error.kind, data, partner=True)))
    assert isinstance(outcome, Completed)
    if outcome.status == ResponseStatus.THROTTLED:
        raw = outcome.error if isinstance(outcome.error, dict) else {}
        return Outcome(status=JobState.FAILED, response={"source": "target"},
                       error=throttled_error(str(raw.get("detail") or "throttled"),
                                             {**raw, FROM_PARTNER: True}))
    if outcome.status == ResponseStatus.SUCCEEDED:
        return Outcome(status=JobState.SUCCEEDED, result=outcome.result,
                       response={"source": "target"})
    raw = (outcome.error if isinstance(outcome.error, dict)
           else {"detail": str(outcome.error or "")})
    raw = {"kind": outcome.kind, **raw}
    detail = raw.get("detail") or raw.get("message") or ""
    kind = str(raw.get("kind") or ErrorKind.RESPONSE_FAILED)
    return Outcome(status=JobState.FAILED, result=outcome.result, response={"source": "target"},
                   error=JobError(kind=kind, detail=str(detail),
                                  retryable=outcome.retryable is not False,
                                  data=_said(kind, raw, partner=True)))


def outcome_from_row(row: InboxRow) -> Outcome:
    """A response from the inbox that ends a try."""
    if row.status == ResponseStatus.SUCCEEDED:
        return Outcome(status=JobState.SUCCEEDED, result=row.result,
                       response={"source": row.source})
    if row.status == ResponseStatus.CANCELLED:
        return Outcome(status=JobState.CANCELLED, error=cancelled_error())
    partner = said_by_partner(row)
    if row.status == ResponseStatus.THROTTLED:
        data: dict[str, Any] = {"source": row.source, FROM_PARTNER: partner}
        if row.extend_seconds is not None:  # the inbox's seconds: retry_after_seconds here
            data["retry_after"] = row.extend_seconds
        detail = (f"throttled by the partner ({row.source} response)" if partner else
                  f"throttled by a {row.source} response sent with an API token "
                  "(this try is given back; nothing is paused)")
        return Outcome(status=JobState.FAILED, error=throttled_error(detail, data),
                       response={"source": row.source})
    raw = row.error if isinstance(row.error, dict) else {}
    detail = raw.get("detail") or raw.get("message") or (row.error if isinstance(row.error, str)
                                                         else "")
    kind = str(raw.get("kind") or ErrorKind.RESPONSE_FAILED)
    error = JobError(kind=kind, detail=str(detail), retryable=row.retryable is not False,
                     data=(_said(kind, raw, partner=partner) if isinstance(row.error, dict)
                           else None if isinstance(row.error, str) else row.error))
    return Outcome(status=JobState.FAILED, result=row.result, error=error,
                   response={"source": row.source})


def inbox_verdict(entry: HeldTry, row: InboxRow) -> InboxOutcome | None:
    """None if the response applies to the entry's try, else why it does not."""
    if row.token is not None and row.token != entry.token:
        return InboxOutcome.STALE  # a signed callback of another job that held this key
    if row.attempt is not None and row.attempt != entry.attempt:
        return InboxOutcome.STALE
    if (row.attempt is None and entry.attempt > 1 and entry.launched_at is not None
            and row.received_at < entry.launched_at):
        # A fixed key and no attempt number: a response received before this try
        # was launched belongs to an earlier try (a try is always marked running
        # before it is sent, so an early response to a first try is still kept).
        return InboxOutcome.LATE
    if entry.outcome is not None:
        return InboxOutcome.DUPLICATE
    return None


def extended_deadline(entry: HeldTry, row: InboxRow, heartbeat_seconds: float | None,
                      now: datetime) -> datetime:
    """A heartbeat's new deadline: ``extend_seconds``, else the queue's heartbeat
    timeout, else the job's timeout, from now; never earlier than the current one."""
    seconds = row.extend_seconds
    if seconds is None:
        seconds = heartbeat_seconds
    if seconds is None:
        seconds = entry.timeout_seconds
    pushed = now + timedelta(seconds=seconds)
    return pushed if entry.deadline is None else max(entry.deadline, pushed)


# -- step 3: ended tries -> changes ---------------------------------------------------


def throttled_error(detail: str, data: Mapping[str, Any]) -> JobError:
    return JobError(kind=ErrorKind.THROTTLED, detail=detail, data=dict(data))


def is_throttled(outcome: Outcome | None) -> bool:
    return (outcome is not None and outcome.error is not None
            and outcome.error.kind == ErrorKind.THROTTLED)


def throttled_in_a_row(job: Job | None) -> int:
    """How many throttled tries of ``job`` were given back in a row (its last error
    says, as requeued by :func:`change_for`)."""
    error = None if job is None else job.error
    if not isinstance(error, dict) or error.get("kind") != ErrorKind.THROTTLED:
        return 0
    count = error.get("in_a_row")
    return count if isinstance(count, int) and count >= 0 else 0


def change_for(entry: HeldTry, spec: QueueSpec | None, retry: RetryFn | None,
               now: datetime, *, paused_until: datetime | None = None,
               new_token: Callable[[], str] = lambda: uuid.uuid4().hex) -> Change:
    """What step 3 persists for an entry that ended or was extended. A failed try
    asks the queue's retry strategy (under the rules of :func:`hipq.retry.decide`)
    with a deep copy of the job (read back first where the entry let it go);
    without the queue's settings, or the job, it gives up.

    A throttled try (docs/throttling.md) is given back: queued again at ``paused_until`` (its
    scope's pause), its attempt not spent, under a new token (its callback URL and
    key complete no later try); past ``backoff.max_throttled`` in a row it is a
    failed try of kind ``throttled`` that waits at least until ``paused_until``."""
    outcome, inbox_ids = entry.outcome, entry.inbox_ids
    status = None if outcome is None else outcome.status
    if status is JobState.SUCCEEDED or status is JobState.CANCELLED:  # the usual case
        assert outcome is not None
        value = _SUCCEEDED if status is JobState.SUCCEEDED else _CANCELLED
        return Change(kind=ChangeKind.ARCHIVE, queue=entry.queue, id=entry.id,
                      attempt=entry.attempt, inbox_ids=inbox_ids, launched_at=entry.launched_at,
                      correlation_key=entry.correlation_key, status=value,
                      result=outcome.result,
                      error=None if outcome.error is None else outcome.error.to_json(),
                      outcome=value, response=outcome.response, trace=entry.trace)
    common: dict[str, Any] = {
        "queue": entry.queue, "id": entry.id, "attempt": entry.attempt, "inbox_ids": inbox_ids,
        "launched_at": entry.launched_at, "correlation_key": entry.correlation_key,
        "trace": entry.trace}
    if outcome is None:
        return Change(kind=ChangeKind.EXTEND, deadline=entry.deadline, **common)
    error = outcome.error or JobError(kind=ErrorKind.RESPONSE_FAILED)
    if error.kind == ErrorKind.THROTTLED and spec is not None:
        in_a_row = throttled_in_a_row(entry.job) + 1
        until = paused_until or now
        if in_a_row <= spec.backoff.max_throttled:
            return Change(kind=ChangeKind.REQUEUE, run_at=until, give_back=True,
                          token=new_token(), error={**error.to_json(), "in_a_row": in_a_row},
                          outcome=ErrorKind.THROTTLED.value, response=outcome.response,
                          **common)
        error = replace(error, data={**(error.data or {}), "retry_after": until.isoformat()})
    verdict: Retry | GiveUp
    if spec is None:
        verdict = GiveUp("the queue no longer exists")
    elif retry is None:
        verdict = GiveUp("the queue's settings cannot be loaded")
    elif entry.job is None:  # let go and not read back: no longer running as this try
        verdict = GiveUp("the job could not be read back")
    else:
        verdict = decide(spec, retry, RetryContext(job=entry.job.snapshot(), error=error,
                                                   now=now))
    if isinstance(verdict, GiveUp):
        return Change(kind=ChangeKind.ARCHIVE, status=JobState.FAILED.value,
                      result=outcome.result, error={**error.to_json(), "gave_up": verdict.reason},
                      outcome=error.kind, response=outcome.response, **common)
    return Change(kind=ChangeKind.REQUEUE, run_at=verdict.at, data=verdict.data,
                  error=error.to_json(), outcome=error.kind, response=outcome.response, **common)

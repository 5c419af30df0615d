"""Step 4 of the tick's plan (:mod:`hipq.engine.plan`), for one queue: its chosen jobs
marked running in one statement and held in the batch, or, for a queue whose tries
run within their tick (:mod:`hipq.engine.inline`), run first: the successes become
ordinary archive changes that the store claims and ends in one call, the rest is
claimed as usual and its answers go through the launcher.

A claim that hits a taken correlation key (keys hipq generates live in a namespace of
their own, so only a damaged database gets here) claims its jobs one by one, and the
one whose key is taken fails alone: never the tick, never another job.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from hipq.engine import inline
from hipq.engine.held import HeldTry
from hipq.engine.requests import ArchiveRan, HandOn, InTickRun, Plan, RunInTick, call
from hipq.engine.result import Counters
from hipq.engine.selection import Selection, read_due, scope
from hipq.errors import StoreConflict
from hipq.jobs import ErrorKind, Job, JobError, JobState
from hipq.spec import QueueSpec
from hipq.throttling import RateBudget

if TYPE_CHECKING:
    from hipq.engine.reconciler import Reconciler

log = logging.getLogger(__name__)


def claim(engine: Reconciler, chosen: Selection, ids: list[str], now: datetime,
          counters: Counters) -> Plan[tuple[list[Job], list[Job]]]:
    """Step 4 for one queue: the tries launched (for metrics) and those step 5 is to
    send (the others ran within the tick)."""
    runtime = chosen.runtime
    spec = runtime.spec
    launched: list[Job] = []
    if engine.config.in_tick_seconds > 0 and inline.eligible(
            spec, runtime.target, listening=_listening(engine, spec)):
        ran, ids = yield from _run_in_tick(engine, chosen, ids, now, counters)
        launched.extend(ran)
    jobs = (yield from _claim(engine, chosen, ids, now)) if ids else []
    _hold(engine, spec, jobs)
    launched.extend(jobs)
    return launched, jobs


def _listening(engine: Reconciler, spec: QueueSpec) -> bool:
    """Whether a queue's successes tell the partner's word something."""
    return spec.adaptive is not None or engine.partner.has_pauses(spec.id)


def _hold(engine: Reconciler, spec: QueueSpec, jobs: Sequence[Job]) -> None:
    """Claimed tries join the batch."""
    add, watch = engine.batch.add, engine.inbox.watch
    grouped = spec.backoff.scope == "group"
    for job in jobs:  # once per launched job
        held = HeldTry(job=job, deadline=job.deadline)
        if grouped:
            held.scope = scope(spec, job)
        add(held)
        if job.correlation_fixed:
            watch(held)


def _run_in_tick(engine: Reconciler, chosen: Selection, ids: list[str], now: datetime,
                 counters: Counters) -> Plan[tuple[list[Job], list[str]]]:
    """Run a queue's new tries within the tick: the successes are claimed and
    archived in one store call; the rest is claimed as usual, its answers going
    through the launcher. The tries that ran (or run), and the ids still to claim and
    launch."""
    runtime, config = chosen.runtime, engine.config
    spec, target = runtime.spec, runtime.target
    assert target is not None
    deadlines: dict[float, datetime] = {}
    tries = [inline.try_of(chosen.candidates[i], now=now, owner=engine.owner,
                           heartbeat_seconds=spec.heartbeat_timeout_seconds,
                           deadlines=deadlines) for i in ids]
    run: InTickRun = yield RunInTick(target=target, tries=tries, wait=config.in_tick_seconds,
                                     concurrency=config.launch_concurrency)
    ends, other = inline.ends_of(run.answered, now)
    # a full page: more is due, and the next page is read as planned now (the executor
    # may read it, and write this page's archive, while the next tick runs)
    more = len(chosen.candidates) >= config.fetch_limit and not engine.stopping
    next_page = (yield from read_due(engine, spec, now)) if more else None
    archived = yield ArchiveRan(spec=spec, ends=ends, owner=engine.owner, now=now,
                                next_page=next_page,
                                ran=inline.in_order(chosen.candidates, ids) if more else ())
    counters.ran(archived.done)
    counters.add("archiving", archived.writing)
    # what ran and is not archived: claimed now, its answers the usual way (a job the
    # claim misses, cancelled meanwhile, say, has its answer dropped)
    claim_now = [r.job.id for r in other] + [j.id for j in run.unanswered]
    claimed = (yield from _claim(engine, chosen, claim_now, now)) if claim_now else []
    _hold(engine, spec, claimed)
    yield HandOn(other)
    ran = [r.job for r in run.answered if (r.job.queue, r.job.id) in archived.applied]
    ran.extend(claimed)
    return ran, [j.id for j in run.unstarted]


def _claim(engine: Reconciler, chosen: Selection, ids: list[str],
           now: datetime) -> Plan[list[Job]]:
    queue = chosen.runtime.spec.id
    try:
        return (yield from _claim_ids(engine, chosen, ids, now))
    except StoreConflict:
        if len(ids) > 1:
            log.error("claim of %d jobs of queue %s hit a taken correlation key; "
                      "claiming them one by one", len(ids), queue,
                      extra={"action": "key_conflict", "queue": queue})
    claimed: list[Job] = []
    for job_id in ids:
        try:
            claimed.extend((yield from _claim_ids(engine, chosen, [job_id], now)))
        except StoreConflict as exc:
            yield from _fail_key_conflict(queue, job_id, exc, now)
    return claimed


def _claim_ids(engine: Reconciler, chosen: Selection, ids: list[str],
               now: datetime) -> Plan[list[Job]]:
    spec = chosen.runtime.spec
    rate_groups = None
    if spec.rate_limit is not None:  # critical jobs are not rate limited, nor counted
        budget = RateBudget.of(spec.rate_limit, {}, now)
        rate_groups = {i: budget.group(chosen.candidates[i]) for i in ids
                       if not chosen.candidates[i].critical}
    claimed: list[Job] = yield call(
        "job_mark_running_many", queue=spec.id, ids=ids, now=now, owner=engine.owner,
        heartbeat_seconds=spec.heartbeat_timeout_seconds, rate_groups=rate_groups,
        # a merging queue may have appended payloads since the fetch: re-read
        known=None if spec.merge_by_ordering_key else chosen.candidates)
    if rate_groups:
        for job in claimed:
            group = rate_groups.get(job.id)
            if group is not None:
                engine.rates.claimed(job, group, now)
    return claimed


def _fail_key_conflict(queue: str, job_id: str, exc: StoreConflict,
                       now: datetime) -> Plan[None]:
    log.error("job %s of queue %s fails: its correlation key is held by another job "
              "(%s)", job_id, queue, exc, extra={"action": "key_conflict", "queue": queue})
    error = JobError(kind=ErrorKind.KEY_CONFLICT, retryable=False,
                     detail="the correlation key of this try is held by another job")
    yield call("job_archive_queued_many", queue=queue,
               ends={job_id: (JobState.FAILED.value, error.to_json())}, now=now)

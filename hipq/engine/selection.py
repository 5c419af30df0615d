"""Steps 1 and 2 of the tick's plan (:mod:`hipq.engine.plan`), for one queue: its due
candidates, in queue order and bounded by what could launch
(:func:`~hipq.engine.decide.plan_fetch`: never the backlog), then its throttler's
choice: launch, reschedule or drop. Expired candidates are archived before the
throttler sees them; a scope the partner paused holds its candidates back
(docs/throttling.md). Each step is a plan (:mod:`hipq.engine.requests`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from hipq.engine.batch import LazyJobs
from hipq.engine.decide import drop_ends, held_reasons, plan_fetch, sift_decision
from hipq.engine.partner_word import PartnerWord
from hipq.engine.requests import Plan, ReadDue, call
from hipq.engine.result import Counters
from hipq.engine.runtimes import QueueRuntime, Runtimes
from hipq.errors import HipqError
from hipq.jobs import Job, JobState, expired_error
from hipq.plugins import ThrottleContext, ThrottleResult
from hipq.spec import QueueSpec
from hipq.store.records import QueueRecord
from hipq.throttling import field_value

if TYPE_CHECKING:
    from hipq.engine.reconciler import Reconciler

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Selection:
    """One queue's choice in steps 1-2: the jobs to claim, and the candidates they
    came from (step 4 needs their rate groups, and builds the running jobs from
    them without reading them again)."""

    runtime: QueueRuntime
    launch: list[str]
    candidates: Mapping[str, Job]


def scope(spec: QueueSpec, job: Job | None) -> str | None:
    """The partner scope of a job's try (None: the whole queue)."""
    field = spec.backoff.field
    if spec.backoff.scope != "group" or field is None:
        return None
    return PartnerWord.scope_of(spec, None if job is None else field_value(job.data, field))


def runtime_of(runtimes: Runtimes, record: QueueRecord) -> QueueRuntime | None:
    """What the queue's settings build; None (logged) where they cannot be had."""
    try:
        return runtimes.get(record)
    except HipqError as exc:
        log.error("queue %s cannot run: %s", record.id, exc,
                  extra={"action": "queue_config_error", "queue": record.id})
        return None


def read_due(engine: Reconciler, spec: QueueSpec, now: datetime, *,
             widen: bool = False) -> Plan[ReadDue]:
    """The read of the queue's due candidates, as planned for what its tries hold now
    (their jobs read back first where the plan needs them)."""
    usage = yield from engine.jobs.usage(spec)
    fetches = plan_fetch(spec, usage, engine.config.fetch_limit, widen=widen)
    return ReadDue(spec=spec, fetches=tuple(fetches), now=now, widen=widen)


def select_queue(engine: Reconciler, runtime: QueueRuntime, now: datetime,
                 counters: Counters) -> Plan[Selection | None]:
    """Steps 1 and 2 for one queue."""
    partner = engine.partner
    spec = partner.in_force(runtime.spec)  # the adaptive limit as its concurrency
    groups_paused = partner.group_pauses(spec.id, now)
    read = yield from read_due(engine, spec, now, widen=bool(groups_paused))
    candidates: list[Job] = yield read
    counters.add("fetched", len(candidates))
    if not candidates:
        yield from _held_at_capacity(engine, spec, now)
        return None
    candidates = yield from _expire(spec.id, candidates, now, counters)
    held: dict[str, int] = {}
    if partner.queue_pause(spec.id, now) is not None:
        partner.held(spec.id, {"backoff": len(candidates)} if candidates else {})
        return None
    if groups_paused:
        kept = [j for j in candidates if scope(spec, j) not in groups_paused]
        if len(kept) < len(candidates):
            held["backoff"] = len(candidates) - len(kept)
        candidates = kept
    recent = yield from _recent_launches(engine, spec, now)
    batch, queue = engine.batch, spec.id
    usage = batch.usage(queue, spec.quotas.field if spec.quotas is not None else None)
    seen: Sequence[Job] = candidates
    running = LazyJobs(lambda: batch.running(queue))
    if spec.custom_throttler:  # a plugin gets deep copies; the built-in one only reads
        seen = [j.snapshot() for j in candidates]
        running = LazyJobs(lambda: [j.snapshot() for j in batch.running(queue)])
        usage = replace(usage, ordering_keys=frozenset(usage.ordering_keys),
                        field_weights=dict(usage.field_weights))
    ctx = ThrottleContext(queue=spec, candidates=seen, running=running, now=now,
                          recent_launches=recent, usage=usage)
    try:
        decision = runtime.throttler.select(ctx)
    except Exception:
        log.exception("throttler of queue %s raised; nothing launches this tick", spec.id,
                      extra={"action": "plugin_error", "queue": spec.id})
        counters.add("throttler_errors")
        held["throttler"] = held.get("throttler", 0) + len(candidates)
        partner.held(spec.id, held)
        return None
    launch = yield from _apply_decision(spec.id, candidates, decision, now, counters)
    paced = partner.pace(spec.id, launch, now)  # the learned rate, if the partner taught one
    admitted = engine.budgets.admit(spec, paced, candidates_by_id := {j.id: j for j in candidates},
                                    now)  # a declared partner's budget
    if len(admitted.launch) < len(launch):
        held["partner"] = len(launch) - len(admitted.launch)
    paced = admitted.launch
    partner.held(spec.id, held_reasons(candidates, decision, launch, held,
                                       trusted=not spec.custom_throttler))
    launch = paced
    if not launch:
        return None
    return Selection(runtime=runtime, launch=launch, candidates=candidates_by_id)


def _recent_launches(engine: Reconciler, spec: QueueSpec,
                     now: datetime) -> Plan[dict[str, list[datetime]]]:
    """The launches a rate limit counts, by group (none without a rate limit)."""
    recent: dict[str, list[datetime]] = {}
    if spec.rate_limit is not None:
        since = now - timedelta(seconds=spec.rate_limit.per_seconds)
        recent = yield call("launch_events_recent", queue=spec.id, since=since)
        for group, times in engine.rates.extra(spec.id, since, now).items():
            recent.setdefault(group, []).extend(times)
    return recent


def _held_at_capacity(engine: Reconciler, spec: QueueSpec, now: datetime) -> Plan[None]:
    """Nothing was fetched: at capacity, the due jobs wait for it (a bounded count, at
    most once a second); else nothing is held."""
    counts: dict[str, int] = {}
    used = engine.batch.usage(spec.id, spec.quotas.field if spec.quotas is not None else None)
    at_capacity = spec.concurrency is not None and used.normal_weight >= spec.concurrency
    if at_capacity and engine.partner.may_count(spec.id, now):
        due = yield call("job_count_due", queue=spec.id, now=now,
                         limit=engine.config.fetch_limit)
        if due:
            counts["concurrency"] = due
    elif at_capacity:
        return  # counted less than a second ago: keep what was counted
    engine.partner.held(spec.id, counts)


def _expire(queue: str, candidates: list[Job], now: datetime,
            counters: Counters) -> Plan[list[Job]]:
    expired = {j.id for j in candidates if j.expires_at is not None and j.expires_at <= now}
    if not expired:
        return candidates
    end = (JobState.EXPIRED.value, expired_error().to_json())
    done = yield call("job_archive_queued_many", queue=queue,
                      ends=dict.fromkeys(expired, end), now=now)
    counters.expired(queue, len(done))
    return [j for j in candidates if j.id not in expired]


def _apply_decision(queue: str, candidates: Sequence[Job], decision: ThrottleResult,
                    now: datetime, counters: Counters) -> Plan[list[str]]:
    sifted = sift_decision(candidates, decision)
    if sifted.reschedule:
        counters.add("rescheduled", (yield call(
            "job_reschedule_many", queue=queue, run_ats=sifted.reschedule, now=now)))
    if sifted.drop:
        counters.add("dropped", len((yield call(
            "job_archive_queued_many", queue=queue, ends=drop_ends(sifted.drop), now=now))))
    return sifted.launch

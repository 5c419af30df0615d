"""The reconcile loop: ``run_once()`` does one tick; the daemon calls it again.

The **current batch** (:mod:`hipq.engine.batch`) is this daemon's in-memory view
of the running jobs of the queues it holds a lease on. The database is
authoritative; the batch is only ever changed after the database says so. A tick:

0. Renew leases, adopting the running jobs of queues gained (:mod:`.leases`);
   apply what launches said at once and the responses from the inbox
   (:mod:`.inbox`); mark entries whose deadline passed as ``timeout``; once a
   second, sweep responses nothing claims and expire queued jobs past
   ``expires_at``.
1. For each held, unpaused queue with a target, fetch due jobs in queue order,
   bounded by the free capacity (:func:`.decide.plan_fetch`; never the backlog).
2. Run the queue's throttler over them -> launch / reschedule / drop. Expired
   candidates are archived before the throttler sees them.
3. Decide the ended tries' fates on copies (:func:`.decide.change_for`, retry
   strategies included) and persist every change in one transaction; what is no
   longer running leaves the batch.
4. Mark the new batch running in one statement per queue; add it to the batch.
5. Launch the new batch in the background (:mod:`.launcher`).

Step 3 runs on its own connection beside steps 1, 2, 4 and 5: they touch
different rows (this daemon's running jobs; queued ones). A job re-queued by step
3 is not claimed in the same tick; the next job of an ordering key is fetched
only once the end of the previous one is committed (until then the fetch sees it
running); capacity counts what is in memory. If step 3 fails, the jobs already
claimed are launched anyway and the error is raised (the next tick persists the
ended tries again).

Invariants: a job is never re-run from memory (once it leaves ``running`` it is
saved and dropped, and runs again only after being fetched); no transaction is
held across network I/O; a tick costs O(what changed): the new batch, the responses
that arrived, the deadlines that passed; never O(backlog), never O(running).

Failure modes: a crash loses only the batch; the next owner adopts running jobs
from the database. A database error aborts the tick; the next tick starts from
the database again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from hipq.clock import Clock
from hipq.config import ReconcileConfig, ResponsesConfig
from hipq.engine import inline
from hipq.engine.archiving import ArchivesInFlight, archive_ran, count_ran
from hipq.engine.batch import Batch, LazyJobs
from hipq.engine.decide import (
    Fetch,
    change_for,
    drop_ends,
    held_reasons,
    may_pause,
    may_slow_down,
    outcome_from_launch,
    outcome_timeout,
    plan_fetch,
    sift_decision,
    throttled_in_a_row,
    unique_jobs,
)
from hipq.engine.held import HeldTry
from hipq.engine.inbox import Inbox
from hipq.engine.jobs_on_demand import JobsOnDemand
from hipq.engine.launcher import Launcher, LaunchResult
from hipq.engine.leases import Leases, adopt
from hipq.engine.maintenance import Vacuum
from hipq.engine.partner import PartnerWord
from hipq.engine.prefetch import PagesAhead, in_order, read_after
from hipq.engine.rates import RateLog
from hipq.engine.result import Counters, ReconcileResult
from hipq.engine.runtimes import QueueRuntime, Runtimes, TargetFactory
from hipq.errors import HipqError, StoreConflict
from hipq.jobs import ErrorKind, Job, JobError, JobState, expired_error
from hipq.plugins import ThrottleContext, ThrottleResult
from hipq.retry import RetryFn
from hipq.spec import QueueSpec
from hipq.store import Change, ChangeKind, QueueRecord, Store
from hipq.targets import Target
from hipq.targets.registry import Targets
from hipq.throttling import RateBudget, field_value

log = logging.getLogger(__name__)

EXPIRY_SWEEP_LIMIT = 1000  # queued jobs past expires_at archived per sweep
SWEEP_EVERY = timedelta(seconds=1)  # backlog sweeps at most this often


@dataclass(frozen=True, slots=True)
class _Selection:
    """One queue's choice in steps 1-2: the jobs to claim, and the candidates they
    came from (step 4 needs their rate groups, and builds the running jobs from
    them without reading them again)."""

    runtime: QueueRuntime
    launch: list[str]
    candidates: Mapping[str, Job]


class Reconciler:
    def __init__(self, store: Store, *, clock: Clock, owner: str,
                 config: ReconcileConfig | None = None,
                 responses: ResponsesConfig | None = None,
                 targets: TargetFactory | None = None,
                 on_wake: Callable[[], None] | None = None) -> None:
        self.store = store
        self.clock = clock
        self.owner = owner
        self.config = config or ReconcileConfig()
        self.batch = Batch()
        self.jobs = JobsOnDemand(self.batch, store)  # jobs the batch let go, read back
        self.runtimes = Runtimes(targets or Targets())
        self.leases = Leases(store, owner=owner, lease_seconds=self.config.lease_seconds)
        self.inbox = Inbox(store, buffer_seconds=(responses or ResponsesConfig()).buffer_seconds,
                           heartbeat_seconds=self._heartbeat_seconds)
        self.rates = RateLog()  # own rate-limited launches (see .rates)
        self.launcher = Launcher(store, clock=clock, owner=owner,
                                 concurrency=self.config.launch_concurrency, on_wake=on_wake,
                                 on_answered=self.rates.answered)
        self.vacuum = Vacuum(store, every=self.config.vacuum_every)
        self.partner = PartnerWord(store)  # pauses, adaptive limits, held counts (SPEC 15)
        self._swept_at: datetime | None = None
        self._stopping = False
        self.pages_ahead = PagesAhead()  # in-tick runs' next pages (.prefetch)
        self.archives = ArchivesInFlight()  # and their archives written meanwhile

    @property
    def held(self) -> set[str]:
        """The queues this daemon holds a lease on."""
        return self.leases.held

    # -- the tick ----------------------------------------------------------------

    async def run_once(self) -> ReconcileResult:
        """One tick: the steps of docs/internals.md ("The tick"), in order."""
        counters, now = Counters(), self.clock.now()
        self.archives.tick += 1
        queues = {q.id: q for q in await self.store.queue_list()}
        # step 0: leases (adoptions), what launches and responses said, deadlines
        await self._leases(queues, now, counters)
        await self.partner.refresh(self.held, queues)
        handing_over = self._ready_to_hand_over()
        self._apply_launches(now, counters)
        await self.inbox.apply(self.batch, now, counters)
        self._mark_timeouts(now, counters)
        await self._sweep(now, counters)
        # step 3 starts first, for speed: the ended tries' fates are decided now and
        # persisted on their own connection while steps 1, 2 and 4 run, since those
        # touch other rows (queued jobs); a job it re-queues is not claimed this tick
        changes = counters.ended = await self._decide_ends(queues, now, counters)
        persisting = asyncio.ensure_future(self._persist(changes, now))
        try:
            selections = await self._select(queues, now, counters)  # steps 1 and 2
            launched, to_launch = await self._mark_running(  # step 4 (and in-tick runs)
                selections, _requeued(changes), now, counters)
            counters.add("launched", len(launched))
            counters.launched_jobs = launched
            self._launch(to_launch)  # step 5, in the background
            for done in (await self.archives.collect_older()).values():
                count_ran(counters, done)  # the last tick's in-tick archives (.archiving)
        except BaseException:
            with contextlib.suppress(BaseException):  # never leave step 3 half-applied
                await persisting
            raise
        await persisting  # step 3 ends here
        self.partner.stamp_held(now)
        await self.partner.save(now)
        for queue in handing_over:  # nothing of theirs left unwritten
            count_ran(counters, await self.archives.collect(queue))
        await self._hand_over(handing_over)  # scale-out: after the persist, see .leases
        counters.wake_at = self.partner.next_end(self.held, now)
        result = counters.result()
        if result.changed:
            log.info("reconcile tick: %s", dict(counters.values), extra={"action": "tick"})
        # the rows moved through the jobs table (a try run within its tick moves once)
        self.vacuum.count(result.launched + result.finished - result.ran_inline)
        return result

    async def _sweep(self, now: datetime, counters: Counters) -> None:
        """Once a second: responses nothing claims, queued jobs past ``expires_at``."""
        if self._swept_at is None or now - self._swept_at >= SWEEP_EVERY:
            self._swept_at = now
            await self.inbox.sweep(self.batch, now, counters)
            for job in await self.store.job_expired_sweep(now=now, limit=EXPIRY_SWEEP_LIMIT):
                counters.expired(job.queue, 1)

    async def _decide_ends(self, queues: Mapping[str, QueueRecord], now: datetime,
                           counters: Counters) -> list[Change]:
        """Step 3's decisions over the tries that ended or were extended (a failed
        try's job read back first, for its retry strategy)."""
        changed = self.batch.changed()
        await self.jobs.for_retries(changed)
        return self._changes(changed, queues, now, counters)

    # -- step 0 ------------------------------------------------------------------

    async def _leases(self, queues: Mapping[str, QueueRecord], now: datetime,
                      counters: Counters) -> None:
        change = await self.leases.refresh(queues, now)
        for queue in change.lost:
            self.batch.drop_queue(queue)
            self.rates.drop_queue(queue)
        for queue in change.gained:
            record = queues.get(queue)
            if record is not None and record.config.rate_limit is not None:
                await self.store.launch_events_restamp(queue=queue, at=now)
            counters.add("adopted", await adopt(self.store, queue=queue, owner=self.owner,
                                                now=now, add=self._adopted))

    def _ready_to_hand_over(self) -> list[str]:
        """Queues being handed over whose launches are all recorded: what this tick
        applies and persists of them is all there is; released at its end."""
        return [q for q in sorted(self.leases.releasing) if not self.launcher.busy(q)]

    async def _hand_over(self, queues: list[str]) -> None:
        if queues:
            for queue in queues:
                await self.rates.write_back(self.store, queue)
            await self.leases.release(queues)
            for queue in queues:
                self.batch.drop_queue(queue)

    async def write_back_rates(self) -> None:
        """At shutdown, before every lease is released: :meth:`.RateLog.write_back`."""
        for queue in self.rates.queues():
            await self.rates.write_back(self.store, queue)

    def _adopted(self, held: HeldTry) -> None:
        """An adopted try: a waiting one lets its job go at once (an adoption may
        bring a whole running set; see :meth:`Batch.add`)."""
        runtime = self.runtimes.cached(held.queue)
        if runtime is not None and held.job is not None:
            held.scope = self._scope(runtime.spec, held.job)
        self.batch.add(held, keep_job=False)
        self.inbox.watch(held)

    def _apply_launches(self, now: datetime, counters: Counters) -> None:
        """Outcomes targets gave at once (and failed launches), straight from memory;
        budgets the partner said were spent pause their scopes."""
        batch, applied = self.batch, 0
        for job, spent in self.launcher.take_spent():
            self._spent(job, spent, now)
        for result in self.launcher.take_outcomes():
            job = result.job
            spent = getattr(result.outcome, "spent", None)
            if spent is not None:
                self._spent(job, spent, now)
            held = batch.get((job.queue, job.id))
            if held is None or held.attempt != job.attempt or held.outcome is not None:
                continue  # timed out or cancelled meanwhile: the first outcome stands
            batch.end(held, outcome_from_launch(result.outcome, result.error))
            applied += 1
        counters.add("responses_applied", applied)

    def _spent(self, job: Job, spent: Any, now: datetime) -> None:
        runtime = self.runtimes.cached(job.queue)
        if runtime is not None and job.queue in self.held:
            spec = runtime.spec
            self.partner.spent(spec, self._scope(spec, job), spent, now)

    @staticmethod
    def _scope(spec: QueueSpec, job: Job | None) -> str | None:
        """The partner scope of a job's try (None: the whole queue)."""
        field = spec.backoff.field
        if spec.backoff.scope != "group" or field is None:
            return None
        return PartnerWord.scope_of(spec, None if job is None else field_value(job.data, field))

    def _mark_timeouts(self, now: datetime, counters: Counters) -> None:
        for held in self.batch.overdue(now):
            assert held.deadline is not None
            self.batch.end(held, outcome_timeout(held.deadline))
            counters.add("timed_out")

    def _heartbeat_seconds(self, queue: str) -> float | None:
        runtime = self.runtimes.cached(queue)
        return None if runtime is None else runtime.spec.heartbeat_timeout_seconds

    # -- steps 1 and 2: fetch and throttle ------------------------------------------

    def _runtime(self, record: QueueRecord) -> QueueRuntime | None:
        try:
            return self.runtimes.get(record)
        except HipqError as exc:
            log.error("queue %s cannot run: %s", record.id, exc,
                      extra={"action": "queue_config_error", "queue": record.id})
            return None

    async def _select(self, queues: Mapping[str, QueueRecord], now: datetime,
                      counters: Counters) -> list[_Selection]:
        selections = []
        for queue_id in sorted(self.held):
            record = queues[queue_id]
            runtime = self._runtime(record)
            if runtime is None or record.paused or runtime.target is None or self._stopping:
                continue
            selection = await self._select_queue(runtime, now, counters)
            if selection is not None:
                selections.append(selection)
        return selections

    async def _select_queue(self, runtime: QueueRuntime, now: datetime,
                            counters: Counters) -> _Selection | None:
        partner = self.partner
        spec = partner.in_force(runtime.spec)  # the adaptive limit as its concurrency
        groups_paused = partner.group_pauses(spec.id, now)
        candidates = await self._fetch(spec, now, widen=bool(groups_paused))
        counters.add("fetched", len(candidates))
        if not candidates:
            await self._held_at_capacity(spec, now)
            return None
        candidates = await self._expire(spec.id, candidates, now, counters)
        held: dict[str, int] = {}
        if partner.queue_pause(spec.id, now) is not None:
            partner.held(spec.id, {"backoff": len(candidates)} if candidates else {})
            return None
        if groups_paused:
            kept = [j for j in candidates if self._scope(spec, j) not in groups_paused]
            if len(kept) < len(candidates):
                held["backoff"] = len(candidates) - len(kept)
            candidates = kept
        recent: dict[str, list[datetime]] = {}
        if spec.rate_limit is not None:
            since = now - timedelta(seconds=spec.rate_limit.per_seconds)
            recent = await self.store.launch_events_recent(queue=spec.id, since=since)
            for group, times in self.rates.extra(spec.id, since, now).items():
                recent.setdefault(group, []).extend(times)
        batch, queue = self.batch, spec.id
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
        launch = await self._apply_decision(spec.id, candidates, decision, now, counters)
        partner.held(spec.id, held_reasons(candidates, decision, launch, held,
                                           trusted=not spec.custom_throttler))
        if not launch:
            return None
        return _Selection(runtime=runtime, launch=launch,
                          candidates={j.id: j for j in candidates})

    async def _held_at_capacity(self, spec: QueueSpec, now: datetime) -> None:
        """Nothing was fetched: at capacity, the due jobs wait for it (a bounded
        count, at most once a second); else nothing is held."""
        counts: dict[str, int] = {}
        used = self.batch.usage(spec.id, spec.quotas.field if spec.quotas is not None else None)
        if (spec.concurrency is not None and used.normal_weight >= spec.concurrency
                and self.partner.may_count(spec.id, now)):
            due = await self.store.job_count_due(queue=spec.id, now=now,
                                                 limit=self.config.fetch_limit)
            if due:
                counts["concurrency"] = due
        elif spec.concurrency is not None and used.normal_weight >= spec.concurrency:
            return  # counted less than a second ago: keep what was counted
        self.partner.held(spec.id, counts)

    async def _fetch(self, spec: QueueSpec, now: datetime, *, widen: bool = False) -> list[Job]:
        if (ahead := await self.pages_ahead.take(spec.id, now, widen=widen)) is not None:
            return ahead
        writing = self.archives.ids(spec.id)  # still queued until their archive commits
        jobs = await self._read_due(spec, now, widen=widen, extra=len(writing))
        return [j for j in jobs if j.id not in writing] if writing else jobs

    async def _read_due(self, spec: QueueSpec, now: datetime, *, widen: bool = False,
                        extra: int = 0, ran: Sequence[Job] = ()) -> list[Job]:
        """The due candidates, read side by side as planned (``extra`` rows more;
        ``ran``: the jobs that ran of the page this one follows, see .prefetch)."""
        plan = plan_fetch(spec, await self.jobs.usage(spec), self.config.fetch_limit,
                          widen=widen)
        if ran and (page := await read_after(self.store, spec, plan, now, ran)) is not None:
            return page

        def read(fetch: Fetch) -> asyncio.Future[list[Job]]:
            return asyncio.ensure_future(self.store.job_fetch_due(
                queue=spec.id, now=now, limit=fetch.limit,
                ordering=fetch.ordering or spec.ordering, key_mode=spec.ordering_key_mode,
                critical_only=fetch.critical_only, group=fetch.group,
                default_group_excluding=fetch.default_group_excluding))

        # side by side (reads, each on its own connection); merged in plan order
        if extra or ran:
            plan = [replace(f, limit=f.limit + extra + len(ran)) for f in plan]
        done = await asyncio.gather(*(read(f) for f in plan), return_exceptions=True)
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        return unique_jobs(batch for batch in done if not isinstance(batch, BaseException))

    async def _expire(self, queue: str, candidates: list[Job], now: datetime,
                      counters: Counters) -> list[Job]:
        expired = {j.id for j in candidates if j.expires_at is not None and j.expires_at <= now}
        if not expired:
            return candidates
        end = (JobState.EXPIRED.value, expired_error().to_json())
        done = await self.store.job_archive_queued_many(
            queue=queue, ends=dict.fromkeys(expired, end), now=now)
        counters.expired(queue, len(done))
        return [j for j in candidates if j.id not in expired]

    async def _apply_decision(self, queue: str, candidates: Sequence[Job],
                              decision: ThrottleResult, now: datetime,
                              counters: Counters) -> list[str]:
        sifted = sift_decision(candidates, decision)
        if sifted.reschedule:
            counters.add("rescheduled", await self.store.job_reschedule_many(
                queue=queue, run_ats=sifted.reschedule, now=now))
        if sifted.drop:
            counters.add("dropped", len(await self.store.job_archive_queued_many(
                queue=queue, ends=drop_ends(sifted.drop), now=now)))
        return sifted.launch

    # -- step 3: retries and persistence ---------------------------------------------

    def _changes(self, changed: Sequence[HeldTry], queues: Mapping[str, QueueRecord],
                 now: datetime, counters: Counters) -> list[Change]:
        """Step 3's decisions, over copies: jobs are frozen, the mutable parts of an
        entry are copied by :func:`change_for`, retry plugins get deep copies."""
        changes = []
        strategies: dict[str, tuple[QueueSpec | None, RetryFn | None]] = {}  # per queue
        listening: dict[str, bool] = {}  # per queue: a success tells the partner's word
        finished = retried = throttled = 0
        succeeded = JobState.SUCCEEDED
        for held in changed:
            queue = held.queue
            strategy = strategies.get(queue)
            if strategy is None:
                strategy = strategies[queue] = self._retry_of(queues.get(queue))
                spec = strategy[0]
                listening[queue] = spec is not None and (
                    spec.adaptive is not None or self.partner.has_pauses(queue))
            paused_until = None
            outcome = held.outcome
            if listening[queue] or (outcome is not None and outcome.status is not succeeded):
                paused_until = self._partner_heard(held, strategy[0], now)
                if paused_until is not None:
                    throttled += 1
                    listening[queue] = True  # it has a pause now: later successes end its row
            change = change_for(held, strategy[0], strategy[1], now, paused_until=paused_until)
            if change.kind is ChangeKind.ARCHIVE:
                finished += 1
            elif change.kind is ChangeKind.REQUEUE:
                retried += 1
            changes.append(change)
        counters.add("finished", finished)
        counters.add("retried", retried)
        counters.add("throttled", throttled)
        return changes

    def _partner_heard(self, held: HeldTry, spec: QueueSpec | None,
                       now: datetime) -> datetime | None:
        """What an ended try tells of the partner (SPEC 15): a success may end its
        scope's streak and grows the adaptive limit; a timeout lowers it; a throttled
        try pauses its scope (returns when the pause ends), or, reported by a
        producer rather than the partner, only its own job waits (returns until when)."""
        outcome = held.outcome
        if spec is None or outcome is None or held.queue not in self.held:
            return None
        partner = self.partner
        if outcome.status is JobState.SUCCEEDED:  # only where the queue listens (_changes)
            partner.succeeded(spec, held.scope if held.job is None
                              else self._scope(spec, held.job), now)
            return None
        error = outcome.error
        if error is None:
            return None
        if error.kind == ErrorKind.TIMEOUT:
            if may_slow_down(error):  # not a producer's "failed" of kind timeout
                partner.slow_down(spec, held.launched_at, now)
            return None
        if error.kind != ErrorKind.THROTTLED:
            return None
        data = error.data if isinstance(error.data, dict) else {}
        if not may_pause(error):  # a producer's word: its own try only (docs/throttling.md)
            return partner.given_back(spec, data.get("retry_after"),
                                      throttled_in_a_row(held.job) + 1, now)
        scope = held.scope if held.job is None else self._scope(spec, held.job)
        return partner.throttled(spec, scope, held.launched_at, data.get("retry_after"),
                                 error.detail or "throttled", now)

    def _retry_of(self, record: QueueRecord | None) -> tuple[QueueSpec | None, RetryFn | None]:
        """A queue's spec and retry strategy (None where they cannot be had)."""
        if record is None:
            return None, None
        try:  # built here when this tick's fetch has not built it yet
            runtime = self.runtimes.get(record)
        except HipqError:
            return record.config.to_spec(), None
        return runtime.spec, runtime.retry

    async def _persist(self, changes: Sequence[Change], now: datetime) -> None:
        """Step 3's writes, in one transaction; then the entries that ended, were
        re-queued or are no longer ours leave the batch."""
        if not changes:
            return
        # beside a write of launch confirmations: a row it changes meanwhile is sent
        # again by persist_batch (PostgreSQL leaves alone a row another transaction
        # changed under the statement; see PostgresStore.persist_batch)
        applied = await self.store.persist_batch(changes=changes, owner=self.owner, now=now)
        leaving: list[tuple[str, str]] = []
        extend = ChangeKind.EXTEND
        for change in changes:
            key = (change.queue, change.id)
            if change.kind is extend and key in applied:
                self.batch.settle(key, change.deadline)
            else:  # ended, re-queued, or no longer ours: it leaves the batch either way
                leaving.append(key)
        self.batch.remove_many(leaving)

    # -- steps 4 and 5: mark running and launch ----------------------------------------

    async def _mark_running(self, selections: Sequence[_Selection],
                            requeued: set[tuple[str, str]], now: datetime,
                            counters: Counters) -> tuple[list[Job], list[Job]]:
        """Step 4: the jobs launched (for metrics) and those step 5 is to launch
        (the others ran within the tick: :mod:`.inline`)."""
        launched: list[Job] = []
        to_launch: list[Job] = []
        if self._stopping:
            return launched, to_launch
        for selection in selections:
            spec = selection.runtime.spec
            ids = [i for i in selection.launch if (spec.id, i) not in requeued]
            if not ids:
                continue
            if self.config.in_tick_seconds > 0 and inline.eligible(
                    spec, selection.runtime.target, listening=self._listening(spec)):
                ran, ids = await self._run_inline(selection, ids, now, counters)
                launched.extend(ran)
            jobs = await self._claim(selection, ids, now) if ids else []
            self._hold(spec, jobs)
            launched.extend(jobs)
            to_launch.extend(jobs)
        return launched, to_launch

    def _hold(self, spec: QueueSpec, jobs: Sequence[Job]) -> None:
        """Claimed tries join the batch."""
        add, watch = self.batch.add, self.inbox.watch
        grouped = spec.backoff.scope == "group"
        for job in jobs:  # once per launched job
            held = HeldTry(job=job, deadline=job.deadline)
            if grouped:
                held.scope = self._scope(spec, job)
            add(held)
            if job.correlation_fixed:
                watch(held)

    def _listening(self, spec: QueueSpec) -> bool:
        """Whether a queue's successes tell the partner's word something (SPEC 15)."""
        return spec.adaptive is not None or self.partner.has_pauses(spec.id)

    async def _run_inline(self, selection: _Selection, ids: list[str], now: datetime,
                          counters: Counters) -> tuple[list[Job], list[str]]:
        """Run a queue's new tries within the tick (:mod:`.inline`): the successes
        are claimed and archived in one statement; the rest is claimed as usual, its
        answers going through the launcher. Returns the tries that ran (or run) and
        the ids still to claim and launch."""
        runtime = selection.runtime
        spec, target = runtime.spec, runtime.target
        assert target is not None
        heartbeat = spec.heartbeat_timeout_seconds
        deadlines: dict[float, datetime] = {}
        tries = [inline.try_of(selection.candidates[i], now=now, owner=self.owner,
                               heartbeat_seconds=heartbeat, deadlines=deadlines) for i in ids]
        run = await inline.run_inline(self.launcher, target, tries,
                                      wait=self.config.in_tick_seconds,
                                      concurrency=self.config.launch_concurrency)
        ends: list[Change] = []
        other: list[LaunchResult] = []
        archive, succeeded = ChangeKind.ARCHIVE, JobState.SUCCEEDED.value
        for result in run.answered:
            if inline.archivable(result):
                job = result.job
                ends.append(Change(
                    kind=archive, queue=job.queue, id=job.id, attempt=job.attempt,
                    launched_at=now, correlation_key=job.correlation_key, status=succeeded,
                    result=getattr(result.outcome, "result", None), outcome=succeeded,
                    trace=job.trace))
            else:
                other.append(result)
        # a backlog (PostgreSQL): the next page is read, and this page archived, while
        # the next tick runs (.prefetch, .archiving); else archived now
        backlog = (len(selection.candidates) >= self.config.fetch_limit
                   and not self._stopping and self.store.dialect == "postgresql")
        count_ran(counters, await self.archives.collect(spec.id))  # the last page's
        if backlog:
            ran = in_order(selection.candidates, ids)
            self.pages_ahead.start(spec.id, now, self._read_due(spec, now, ran=ran), ids)
        writes = archive_ran(self.store, spec, ends, owner=self.owner, now=now)
        if backlog and ends:
            self.archives.start(spec.id, writes, ends)
            counters.add("archiving", len(ends))
            applied = {(c.queue, c.id) for c in ends}  # as far as this tick knows
        else:
            applied = await writes
            count_ran(counters, [c for c in ends if (c.queue, c.id) in applied])
        # what ran and is not archived: claimed now, its answers the usual way (a job
        # the claim misses, cancelled meanwhile, say, has its answer dropped)
        claim_now = [r.job.id for r in other] + [j.id for j in run.unanswered]
        claimed = await self._claim(selection, claim_now, now) if claim_now else []
        self._hold(spec, claimed)
        self.launcher.expect([r.job for r in other])
        for result in other:
            self.launcher.record(result)
        ran = [r.job for r in run.answered if (r.job.queue, r.job.id) in applied]
        ran.extend(claimed)
        return ran, [j.id for j in run.unstarted]

    async def _claim(self, selection: _Selection, ids: list[str], now: datetime) -> list[Job]:
        """Step 4 for one queue. If the claim hits a taken correlation key (keys hipq
        generates live in a namespace of their own, so only a damaged database gets
        here), the jobs are claimed one by one and the one whose key is taken fails
        alone: never the tick, never another job."""
        try:
            return await self._claim_ids(selection, ids, now)
        except StoreConflict:
            if len(ids) > 1:
                log.error("claim of %d jobs of queue %s hit a taken correlation key; "
                          "claiming them one by one", len(ids), selection.runtime.spec.id,
                          extra={"action": "key_conflict", "queue": selection.runtime.spec.id})
        claimed: list[Job] = []
        for job_id in ids:
            try:
                claimed.extend(await self._claim_ids(selection, [job_id], now))
            except StoreConflict as exc:
                await self._fail_key_conflict(selection.runtime.spec.id, job_id, exc, now)
        return claimed

    async def _claim_ids(self, selection: _Selection, ids: list[str],
                         now: datetime) -> list[Job]:
        spec = selection.runtime.spec
        rate_groups = None
        if spec.rate_limit is not None:  # critical jobs are not rate limited, nor counted
            budget = RateBudget.of(spec.rate_limit, {}, now)
            rate_groups = {i: budget.group(selection.candidates[i]) for i in ids
                           if not selection.candidates[i].critical}
        claimed = await self.store.job_mark_running_many(
            queue=spec.id, ids=ids, now=now, owner=self.owner,
            heartbeat_seconds=spec.heartbeat_timeout_seconds, rate_groups=rate_groups,
            # a merging queue may have appended payloads since the fetch: re-read
            known=None if spec.merge_by_ordering_key else selection.candidates)
        if rate_groups:
            for job in claimed:
                group = rate_groups.get(job.id)
                if group is not None:
                    self.rates.claimed(job, group, now)
        return claimed

    async def _fail_key_conflict(self, queue: str, job_id: str, exc: StoreConflict,
                                 now: datetime) -> None:
        log.error("job %s of queue %s fails: its correlation key is held by another job "
                  "(%s)", job_id, queue, exc, extra={"action": "key_conflict", "queue": queue})
        error = JobError(kind=ErrorKind.KEY_CONFLICT, retryable=False,
                         detail="the correlation key of this try is held by another job")
        await self.store.job_archive_queued_many(
            queue=queue, ends={job_id: (JobState.FAILED.value, error.to_json())}, now=now)

    def _launch(self, jobs: Sequence[Job]) -> None:
        launches = []
        targets: dict[str, Target] = {}  # per queue
        for job in jobs:
            target = targets.get(job.queue)
            if target is None:
                runtime = self.runtimes.cached(job.queue)
                assert runtime is not None
                assert runtime.target is not None
                target = targets[job.queue] = runtime.target
            launches.append((target, job))
        self.launcher.launch_many(launches)

    async def drain(self) -> None:
        """Wait until every launch of earlier ticks has finished and been recorded
        (and a vacuum under way, and pages read ahead, have ended)."""
        await self.launcher.drain()
        await self.vacuum.wait()
        await self.pages_ahead.wait()
        await self.archives.wait()

    def stop(self) -> None:
        """Stop launching new jobs (graceful shutdown); running jobs stay running."""
        self._stopping = True
        self.leases.stopping = True
        self.pages_ahead.cancel()


def _requeued(changes: Sequence[Change]) -> set[tuple[str, str]]:
    return {(c.queue, c.id) for c in changes if c.kind is ChangeKind.REQUEUE}


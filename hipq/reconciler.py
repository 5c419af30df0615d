"""The reconcile loop: ``run_once()`` does one tick; the daemon calls it again.

State model. The **current batch** is this daemon's in-memory view of the running
jobs of the queues it holds a lease on: one :class:`Entry` per job, keyed by
(queue, id). The database is authoritative; the batch is a cache that is only
ever changed after the database says so:

0. Apply responses from the inbox to entries of the batch (matched by correlation
   key; stale attempts and duplicates are marked, not applied); mark entries whose
   deadline passed as errored with ``timeout``. Sweep other pending responses
   (late ones go on the job's history, unknown ones expire to ``unmatched``).
1. For each held, unpaused queue with a target, fetch due jobs in queue order,
   bounded by the free capacity (never the whole backlog).
2. Run the queue's throttler over them (with the running entries) -> launch /
   reschedule / drop. Expired candidates are archived before the throttler.
3. Take a defensive copy of the batch, run retry strategies over copies in error,
   persist every changed copy in one transaction, and drop the jobs that are no
   longer running from the batch.
4. Mark the new batch running in one statement per queue and add it to the batch.
5. Launch the new batch concurrently (bounded) in the background. Accepted
   launches are confirmed in batches; outcomes a target gives at once come back
   in memory, wake the loop, and are applied in the next tick's step 0 (a crash
   before they are persisted leaves the try unconfirmed: ``lost``).

Invariants: a job is never re-run from memory (once it leaves ``running`` it is
saved and dropped, and runs again only after being fetched); no transaction is
held across network I/O; a tick costs O(batch), not O(backlog).

Failure modes: a crash loses only the batch; the next owner adopts running jobs
from the database (confirmed launches wait for their response or deadline,
unconfirmed ones fail with ``lost``). A database error aborts the tick before
anything launches; the next tick starts from the database again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from hipq.clock import Clock
from hipq.config import QueueConfig, ReconcileConfig, ResponsesConfig
from hipq.errors import HipqError
from hipq.frozen import quick_init
from hipq.jobs import ErrorKind, Job, JobError, JobState, Ordering
from hipq.launcher import Launcher, LaunchResult
from hipq.plugins import GiveUp, RetryContext, ThrottleContext, Throttler, ThrottleResult
from hipq.retry import RetryFn, build_retry, decide
from hipq.store import (
    Change,
    ChangeKind,
    InboxOutcome,
    InboxRow,
    QueueRecord,
    SQLStore,
)
from hipq.targets import Completed, Target, build_target
from hipq.targets.http import HttpClient
from hipq.targets.kafka import KafkaProducer
from hipq.throttling import DEFAULT_GROUP, QuotaPlan, RateBudget, build_throttler
from hipq.throttling.builtin import BuiltinThrottler

log = logging.getLogger(__name__)

SWEEP_LIMIT = 500
SWEEP_GRACE = timedelta(seconds=1)
EXPIRY_SWEEP_LIMIT = 1000
SWEEP_EVERY = timedelta(seconds=1)
_ENDS_AS_IS = frozenset({JobState.SUCCEEDED.value, JobState.CANCELLED.value})


@quick_init
@dataclass(frozen=True, slots=True)
class Outcome:
    """How a try ended, as known in memory before it is persisted."""

    status: str  # succeeded | failed | cancelled
    result: Any = None
    error: JobError | None = None
    response: Any = None


@dataclass(slots=True)
class Entry:
    job: Job
    deadline: datetime | None
    outcome: Outcome | None = None
    inbox_ids: list[int] = field(default_factory=list)
    extended: bool = False


@dataclass(frozen=True, slots=True)
class ReconcileResult:
    fetched: int = 0
    launched: int = 0
    rescheduled: int = 0
    dropped: int = 0
    expired: int = 0
    retried: int = 0
    finished: int = 0
    timed_out: int = 0
    responses_applied: int = 0
    adopted: int = 0
    throttler_errors: int = 0
    # for metrics (hipq.metrics), by reference: no per-job work in the tick
    launched_jobs: Sequence[Job] = ()
    ended: Sequence[Change] = ()
    expired_by_queue: Mapping[str, int] = field(default_factory=dict)
    responses_by_outcome: Mapping[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return any(getattr(self, name) for name in self.__dataclass_fields__)


@dataclass(slots=True)
class _Counters:
    values: dict[str, int] = field(default_factory=dict)
    launched_jobs: Sequence[Job] = ()
    ended: Sequence[Change] = ()
    expired_by_queue: dict[str, int] = field(default_factory=dict)
    responses_by_outcome: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, n: int = 1) -> None:
        if n:
            self.values[name] = self.values.get(name, 0) + n

    def expired(self, queue: str, n: int) -> None:
        self.add("expired", n)
        if n:
            self.expired_by_queue[queue] = self.expired_by_queue.get(queue, 0) + n

    def responses(self, marks: Sequence[tuple[int, InboxOutcome]]) -> None:
        for _, outcome in marks:
            self.responses_by_outcome[outcome] = self.responses_by_outcome.get(outcome, 0) + 1

    def result(self) -> ReconcileResult:
        return ReconcileResult(**self.values, launched_jobs=self.launched_jobs,
                               ended=self.ended, expired_by_queue=self.expired_by_queue,
                               responses_by_outcome=self.responses_by_outcome)


@dataclass(slots=True)
class _QueueRuntime:
    """What a queue's settings build: kept until the settings change."""

    config: QueueConfig
    throttler: Throttler
    retry: RetryFn
    target: Target | None


class Reconciler:
    def __init__(self, store: SQLStore, *, clock: Clock, owner: str,
                 config: ReconcileConfig | None = None,
                 responses: ResponsesConfig | None = None,
                 memory_targets: Mapping[str, Target] | None = None,
                 http_client: HttpClient | None = None,
                 kafka_producer: KafkaProducer | None = None,
                 on_wake: Callable[[], None] | None = None) -> None:
        self.store = store
        self.clock = clock
        self.owner = owner
        self.config = config or ReconcileConfig()
        self.responses = responses or ResponsesConfig()
        self.memory_targets = memory_targets
        self.http_client = http_client
        self.kafka_producer = kafka_producer
        self.on_wake = on_wake
        self.batch: dict[tuple[str, str], Entry] = {}
        self.held: set[str] = set()
        self._runtimes: dict[str, _QueueRuntime] = {}
        self.launcher = Launcher(store, clock=clock, owner=owner,
                                 concurrency=self.config.launch_concurrency, on_wake=on_wake)
        self._sweep_after = 0
        self._swept_at: datetime | None = None
        self._leased_at: datetime | None = None
        self._seen_queues: set[str] = set()
        self._stopping = False
        self._candidates: dict[str, list[Job]] = {}
        self._moved = 0  # jobs claimed or ended since the jobs table was last vacuumed
        self._vacuum: asyncio.Task[bool] | None = None
        self._vacuums = self.config.vacuum_every > 0

    # -- the tick ----------------------------------------------------------------

    async def run_once(self) -> ReconcileResult:
        counters = _Counters()
        now = self.clock.now()
        queues = {q.id: q for q in await self.store.queue_list()}
        await self._leases(queues, now, counters)
        self._apply_launches(counters)
        await self._apply_inbox(now, counters)
        self._mark_timeouts(now, counters)
        if self._swept_at is None or now - self._swept_at >= SWEEP_EVERY:
            # the backlog sweeps run at most once a second, not on every early wake
            self._swept_at = now
            await self._sweep_inbox(now, counters)
            for job in await self.store.job_expired_sweep(now=now, limit=EXPIRY_SWEEP_LIMIT):
                counters.expired(job.queue, 1)
        await self._steps_1_to_5(queues, now, counters)
        result = counters.result()
        if result.changed:
            log.info("reconcile tick: %s", dict(counters.values),
                     extra={"action": "tick"})
        self._maintain(result)
        return result

    def _maintain(self, result: ReconcileResult) -> None:
        """Vacuum the jobs table in the background once enough jobs moved through
        it (``reconcile.vacuum_every``); one vacuum at a time; given up for good
        where the store cannot (SQLite, or not allowed)."""
        self._moved += result.launched + result.finished
        if not self._vacuums or self._moved < self.config.vacuum_every:
            return
        if self._vacuum is not None and not self._vacuum.done():
            return
        self._moved = 0

        async def vacuum() -> bool:
            try:
                done = await self.store.jobs_vacuum()
            except HipqError as exc:
                log.warning("vacuum of the jobs table failed: %s", exc,
                            extra={"action": "vacuum_error"})
                return True  # try again later
            if not done:
                self._vacuums = False
            return done

        self._vacuum = asyncio.ensure_future(vacuum())

    async def _steps_1_to_5(self, queues: Mapping[str, QueueRecord], now: datetime,
                            counters: _Counters) -> None:
        """Step 3 (persist the ended tries) runs on its own connection while steps
        1-2 (fetch and throttle), 4 (mark the new batch running) and 5 (launch) run
        on others: they touch different rows (this daemon's running jobs; queued
        ones), so the database works on one while this process works on the other.

        What the order used to guarantee still holds: a job re-queued by this
        tick's step 3 is not claimed in this tick (it runs again from a later
        fetch, as always); the next job of an ordering key is only fetched once
        the end of the one before is committed (until then the fetch sees that
        one running); capacity counts what is in memory, as before. If step 3
        fails, the jobs already claimed are launched anyway, then the error is
        raised (the next tick persists the ended tries again)."""
        changes = counters.ended = self._changes(queues, now, counters)
        requeued = {(c.queue, c.id) for c in changes if c.kind is ChangeKind.REQUEUE}
        persisting = asyncio.ensure_future(self._persist(changes, now))
        try:
            chosen = await self._select(queues, now, counters)
            if not self._stopping:
                if requeued:
                    chosen = {queue: [i for i in ids if (queue, i) not in requeued]
                              for queue, ids in chosen.items()}
                launched = await self._mark_running(queues, chosen, now)
                counters.add("launched", len(launched))
                counters.launched_jobs = launched
                self._launch(launched)
        except BaseException:
            with contextlib.suppress(BaseException):  # never leave step 3 half-applied
                await persisting
            raise
        await persisting

    # -- leases and adoption -----------------------------------------------------

    async def _leases(self, queues: Mapping[str, QueueRecord], now: datetime,
                      counters: _Counters) -> None:
        """Acquire and renew leases: on a third of the lease time, or at once when a
        queue appeared or went away (early wake-ups do not renew each time)."""
        renew_every = timedelta(seconds=self.config.lease_seconds / 3)
        if (self._leased_at is not None and now - self._leased_at < renew_every
                and set(queues) == self._seen_queues):
            return
        held = await self.store.lease_acquire_many(
            queues=list(queues), owner=self.owner, now=now, seconds=self.config.lease_seconds)
        self._leased_at, self._seen_queues = now, set(queues)
        for lost in self.held - held:
            log.warning("lost the lease on queue %s", lost, extra={"action": "lease_lost"})
            self.batch = {k: e for k, e in self.batch.items() if k[0] != lost}
        for gained in sorted(held - self.held):
            counters.add("adopted", await self._adopt(gained, now))
        self.held = held

    async def _adopt(self, queue: str, now: datetime) -> int:
        """Take over the running jobs of a queue whose lease we just acquired."""
        running = await self.store.job_load_running(queue=queue)
        await self.store.job_adopt_many(queue=queue, ids=[j.id for j in running],
                                        owner=self.owner, now=now)
        for job in running:
            job = replace(job, owner=self.owner)
            entry = Entry(job=job, deadline=job.deadline)
            if not job.launch_confirmed:
                entry.outcome = Outcome(status="failed", error=JobError(
                    kind=ErrorKind.LOST, detail="the daemon that launched this try died "
                                                "before the launch was confirmed"))
            self.batch[job.key] = entry
        if running:
            log.info("adopted %d running jobs of queue %s", len(running), queue,
                     extra={"action": "adopt", "queue": queue})
        return len(running)

    # -- step 0: responses and timeouts --------------------------------------------

    def _apply_launches(self, counters: _Counters) -> None:
        """Outcomes targets gave at once (and failed launches), straight from memory."""
        for result in self.launcher.take_outcomes():
            entry = self.batch.get(result.job.key)
            if (entry is None or entry.job.attempt != result.job.attempt
                    or entry.outcome is not None):
                continue  # timed out or cancelled meanwhile: the first outcome stands
            entry.outcome = _outcome_from_launch(result)
            counters.add("responses_applied")

    async def _apply_inbox(self, now: datetime, counters: _Counters) -> None:
        by_key = {e.job.correlation_key: e for e in self.batch.values() if e.job.correlation_key}
        rows = await self.store.inbox_pending_for_keys(list(by_key))
        marks: list[tuple[int, InboxOutcome]] = []
        late: list[tuple[str, str, InboxRow]] = []
        for row in rows:
            entry = by_key[row.correlation_key]
            if row.id in entry.inbox_ids:
                continue  # applied in memory already; a failed persist left it pending
            verdict = self._apply_row(entry, row, now)
            if verdict is None:
                counters.add("responses_applied")
                continue
            marks.append((row.id, verdict))
            if verdict is InboxOutcome.LATE:
                late.append((entry.job.queue, entry.job.id, row))
        if late:
            await self.store.attempt_record_late_many(late, now=now)
        if marks:
            counters.responses(marks)
            await self.store.inbox_mark_many(marks, now=now)

    def _apply_row(self, entry: Entry, row: InboxRow, now: datetime) -> InboxOutcome | None:
        """Apply one response to its entry; None if applied, else why not."""
        if row.attempt is not None and row.attempt != entry.job.attempt:
            return InboxOutcome.STALE
        if (row.attempt is None and entry.job.attempt > 1 and entry.job.launched_at is not None
                and row.received_at < entry.job.launched_at):
            # A fixed key and no attempt number: a response received before this try
            # was launched belongs to an earlier try (a try is always marked running
            # before it is sent, so an early response to a first try is still kept).
            return InboxOutcome.LATE
        if entry.outcome is not None:
            return InboxOutcome.DUPLICATE
        entry.inbox_ids.append(row.id)
        if row.status == "running":
            entry.deadline = self._extended_deadline(entry, row, now)
            entry.extended = True
            return None
        entry.outcome = _outcome_from_row(row)
        return None

    def _extended_deadline(self, entry: Entry, row: InboxRow, now: datetime) -> datetime:
        runtime = self._runtimes.get(entry.job.queue)
        seconds = row.extend_seconds
        if seconds is None and runtime is not None:
            seconds = runtime.config.heartbeat_timeout_seconds
        if seconds is None:
            seconds = entry.job.timeout_seconds
        pushed = now + timedelta(seconds=seconds)
        return pushed if entry.deadline is None else max(entry.deadline, pushed)

    def _mark_timeouts(self, now: datetime, counters: _Counters) -> None:
        for entry in self.batch.values():
            if entry.outcome is None and entry.deadline is not None and entry.deadline <= now:
                entry.outcome = Outcome(status="failed", error=JobError(
                    kind=ErrorKind.TIMEOUT, detail=f"no response by {entry.deadline.isoformat()}"))
                counters.add("timed_out")

    async def _sweep_inbox(self, now: datetime, counters: _Counters) -> None:
        """Classify pending responses that match nothing in the batch (bounded)."""
        rows = await self.store.inbox_pending_scan(after_id=self._sweep_after,
                                                   before=now - SWEEP_GRACE, limit=SWEEP_LIMIT)
        self._sweep_after = rows[-1].id if len(rows) == SWEEP_LIMIT else 0
        in_batch = {e.job.correlation_key for e in self.batch.values()}
        rows = [r for r in rows if r.correlation_key not in in_batch]
        if not rows:
            return
        keys = list({r.correlation_key for r in rows})
        live = await self.store.job_keys_lookup(keys)
        past = await self.store.archived_by_attempt_keys([k for k in keys if k not in live])
        late: list[tuple[str, str, InboxRow]] = []
        marks: list[tuple[int, InboxOutcome]] = []
        expiry = now - timedelta(seconds=self.responses.buffer_seconds)
        for row in rows:
            if row.correlation_key in live:
                continue  # the job is queued or owned elsewhere: keep it for its owner
            if row.correlation_key in past:
                queue, job_id = past[row.correlation_key]
                late.append((queue, job_id, row))
                marks.append((row.id, InboxOutcome.LATE))
            elif row.received_at < expiry:
                marks.append((row.id, InboxOutcome.UNMATCHED))
                log.warning("unmatched response for correlation key %s", row.correlation_key,
                            extra={"action": "response_unmatched"})
        await self.store.attempt_record_late_many(late, now=now)
        counters.responses(marks)
        await self.store.inbox_mark_many(marks, now=now)

    # -- steps 1 and 2: fetch and throttle ------------------------------------------

    def _runtime(self, record: QueueRecord) -> _QueueRuntime:
        current = self._runtimes.get(record.id)
        if current is not None and current.config == record.config:
            return current
        config = record.config
        target = None
        if config.target is not None:
            target = build_target(config.target, memory=self.memory_targets,
                                  http=self.http_client, kafka=self.kafka_producer)
        runtime = _QueueRuntime(config=config, throttler=build_throttler(config),
                                retry=build_retry(config.retry), target=target)
        self._runtimes[record.id] = runtime
        return runtime

    async def _select(self, queues: Mapping[str, QueueRecord], now: datetime,
                      counters: _Counters) -> dict[str, list[str]]:
        chosen: dict[str, list[str]] = {}
        self._candidates = {}
        for queue_id in sorted(self.held):
            record = queues[queue_id]
            try:
                runtime = self._runtime(record)
            except HipqError as exc:
                log.error("queue %s cannot run: %s", queue_id, exc,
                          extra={"action": "queue_config_error", "queue": queue_id})
                continue
            if record.paused or runtime.target is None or self._stopping:
                continue
            ids = await self._select_queue(runtime, now, counters)
            if ids:
                chosen[queue_id] = ids
        return chosen

    def _running(self, queue: str) -> list[Job]:
        """Running jobs of a queue that still hold capacity (no outcome yet)."""
        return [e.job for k, e in self.batch.items() if k[0] == queue and e.outcome is None]

    async def _select_queue(self, runtime: _QueueRuntime, now: datetime,
                            counters: _Counters) -> list[str]:
        config = runtime.config
        running = self._running(config.id)
        candidates = await self._fetch(config, running, now)
        counters.add("fetched", len(candidates))
        if not candidates:
            return []
        candidates = await self._expire(config.id, candidates, now, counters)
        recent: dict[str, list[datetime]] = {}
        if config.rate_limit is not None:
            recent = await self.store.launch_events_recent(
                queue=config.id, since=now - timedelta(seconds=config.rate_limit.per_seconds))
        if not isinstance(runtime.throttler, BuiltinThrottler):  # plugins get copies
            candidates_seen = [j.snapshot() for j in candidates]
            running = [j.snapshot() for j in running]
        else:  # the built-in throttler only reads the (frozen) jobs
            candidates_seen = list(candidates)
        ctx = ThrottleContext(queue=config, candidates=candidates_seen, running=running,
                              now=now, recent_launches=recent)
        try:
            decision = runtime.throttler.select(ctx)
        except Exception:
            log.exception("throttler of queue %s raised; nothing launches this tick", config.id,
                          extra={"action": "plugin_error", "queue": config.id})
            counters.add("throttler_errors")
            return []
        self._candidates[config.id] = candidates
        return await self._apply_decision(config.id, candidates, decision, now, counters)

    async def _fetch(self, config: QueueConfig, running: Sequence[Job],
                     now: datetime) -> list[Job]:
        """Due candidates, bounded by what could launch: free capacity (per quota
        group when the queue has quotas), plus critical jobs, plus the oldest due
        jobs when aging may promote them."""
        limit = self.config.fetch_limit
        normal_free = _free(config.concurrency, (j for j in running if not j.critical), limit)
        critical_free = _free(config.effective_critical_concurrency,
                              (j for j in running if j.critical), limit)
        fetch = partial(self.store.job_fetch_due, queue=config.id, now=now,
                        ordering=config.ordering, key_mode=config.ordering_key_mode)
        fetches: list[Awaitable[list[list[Job]]]] = []
        # with a per-group rate limit, the first jobs in order may all belong to
        # groups out of budget: look further so they do not hide the other groups
        wide = limit if config.rate_limit is not None and config.rate_limit.by else 0
        if normal_free > 0:
            if config.quotas is not None and config.concurrency is not None:
                fetches.append(self._fetch_groups(config, running, normal_free, fetch, wide))
            else:
                fetches.append(_listed(fetch(limit=max(normal_free, wide))))
            if config.aging_seconds and config.ordering is Ordering.PRIORITY_THEN_TIME:
                fetches.append(_listed(fetch(limit=normal_free,
                                             ordering=Ordering.TIME_THEN_PRIORITY)))
        if critical_free > 0:
            fetches.append(_listed(fetch(limit=critical_free, critical_only=True)))
        # side by side (reads, each on its own connection); merged in this order
        done = await asyncio.gather(*fetches, return_exceptions=True)
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        batches = [batch for outcome in done if not isinstance(outcome, BaseException)
                   for batch in outcome]
        seen: set[str] = set()
        jobs = []
        for batch in batches:
            for job in batch:
                if job.id not in seen:
                    seen.add(job.id)
                    jobs.append(job)
        return jobs

    @staticmethod
    async def _fetch_groups(config: QueueConfig, running: Sequence[Job], free: int,
                            fetch: Callable[..., Awaitable[list[Job]]],
                            wide: int = 0) -> list[list[Job]]:
        """One bounded fetch per quota group that has room (all groups may borrow
        when the queue lends unused quota)."""
        assert config.quotas is not None
        assert config.concurrency is not None
        plan = QuotaPlan.of(config.quotas.model_dump(), config.concurrency,
                            [j for j in running if not j.critical])
        listed = sorted(config.quotas.shares)
        out = []
        for group in [*listed, DEFAULT_GROUP]:
            room = free if config.quotas.lend_unused else min(plan.free(group), free)
            if room <= 0:
                continue
            room = max(room, wide)
            if group == DEFAULT_GROUP:
                out.append(await fetch(limit=room, default_group_excluding=listed))
            else:
                out.append(await fetch(limit=room, group=group))
        return out

    async def _expire(self, queue: str, candidates: list[Job], now: datetime,
                      counters: _Counters) -> list[Job]:
        expired = {j.id for j in candidates if j.expires_at is not None and j.expires_at <= now}
        if not expired:
            return candidates
        error = {"kind": "expired", "detail": "expires_at passed before launch"}
        done = await self.store.job_archive_queued_many(
            queue=queue, ends=dict.fromkeys(expired, (JobState.EXPIRED.value, error)), now=now)
        counters.expired(queue, len(done))
        return [j for j in candidates if j.id not in expired]

    async def _apply_decision(self, queue: str, candidates: Sequence[Job],
                              decision: ThrottleResult, now: datetime,
                              counters: _Counters) -> list[str]:
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
        if reschedule:
            counters.add("rescheduled", await self.store.job_reschedule_many(
                queue=queue, run_ats=reschedule, now=now))
        if drop:
            ends = {i: (JobState.EXPIRED.value if reason == "expired" else JobState.FAILED.value,
                        {"kind": "dropped", "detail": reason}) for i, reason in drop.items()}
            counters.add("dropped", len(await self.store.job_archive_queued_many(
                queue=queue, ends=ends, now=now)))
        return launch

    # -- step 3: retries and persistence ---------------------------------------------

    def _changes(self, queues: Mapping[str, QueueRecord], now: datetime,
                 counters: _Counters) -> list[Change]:
        """Step 3's decisions: the retry strategy applied to copies of the entries
        that ended (jobs are frozen, so the entry's job is a copy already; the
        mutable parts of the entry are copied; retry plugins get deep copies)."""
        return [self._change(queues, entry.job, entry.outcome, entry.deadline,
                             tuple(entry.inbox_ids), counters, now)
                for entry in self.batch.values()
                if entry.outcome is not None or entry.extended]

    async def _persist(self, changes: Sequence[Change], now: datetime) -> None:
        """Step 3's writes, in one transaction; then the entries that ended, were
        re-queued or are no longer ours leave the batch."""
        if not changes:
            return
        applied = await self.store.persist_batch(changes=changes, owner=self.owner, now=now)
        for change in changes:
            key = (change.queue, change.id)
            entry = self.batch.get(key)
            if entry is None:
                continue
            if change.kind is ChangeKind.EXTEND and key in applied:
                entry.extended = False
                entry.inbox_ids.clear()
                entry.job = replace(entry.job, deadline=change.deadline)
            else:  # ended, re-queued, or no longer ours: it leaves the batch either way
                del self.batch[key]

    def _change(self, queues: Mapping[str, QueueRecord], job: Job, outcome: Outcome | None,
                deadline: datetime | None, inbox_ids: tuple[int, ...], counters: _Counters,
                now: datetime) -> Change:
        if outcome is None:
            return Change(kind=ChangeKind.EXTEND, queue=job.queue, id=job.id,
                          attempt=job.attempt, inbox_ids=inbox_ids, launched_at=job.launched_at,
                          correlation_key=job.correlation_key, deadline=deadline)
        if outcome.status in _ENDS_AS_IS:
            counters.add("finished")
            return Change(kind=ChangeKind.ARCHIVE, queue=job.queue, id=job.id,
                          attempt=job.attempt, inbox_ids=inbox_ids,
                          launched_at=job.launched_at, correlation_key=job.correlation_key,
                          status=outcome.status, result=outcome.result,
                          error=None if outcome.error is None else outcome.error.to_json(),
                          outcome=outcome.status, response=outcome.response)
        common: dict[str, Any] = {
            "queue": job.queue, "id": job.id, "attempt": job.attempt, "inbox_ids": inbox_ids,
            "launched_at": job.launched_at, "correlation_key": job.correlation_key}
        error = outcome.error or JobError(kind=ErrorKind.RESPONSE_FAILED)
        record = queues.get(job.queue)
        config = record.config if record is not None else None
        runtime = None
        if record is not None:
            try:  # built here when this tick's fetch has not built it yet
                runtime = self._runtime(record)
            except HipqError:
                runtime = None
        if config is None:
            verdict: Any = GiveUp("the queue no longer exists")
        elif runtime is None:
            verdict = GiveUp("the queue's settings cannot be loaded")
        else:
            ctx = RetryContext(job=job.snapshot(), error=error, now=now)
            verdict = decide(config, runtime.retry, ctx)
        if isinstance(verdict, GiveUp):
            counters.add("finished")
            return Change(kind=ChangeKind.ARCHIVE, status=JobState.FAILED.value,
                          result=outcome.result,
                          error={**error.to_json(), "gave_up": verdict.reason},
                          outcome=error.kind, response=outcome.response, **common)
        counters.add("retried")
        return Change(kind=ChangeKind.REQUEUE, run_at=verdict.at, data=verdict.data,
                      error=error.to_json(), outcome=error.kind, response=outcome.response,
                      **common)

    # -- steps 4 and 5: mark running and launch ----------------------------------------

    async def _mark_running(self, queues: Mapping[str, QueueRecord],
                            chosen: Mapping[str, list[str]], now: datetime) -> list[Job]:
        launched: list[Job] = []
        for queue_id, ids in chosen.items():
            config = queues[queue_id].config
            rate_groups = None
            if config.rate_limit is not None:
                budget = RateBudget.of(config.rate_limit.model_dump(), {}, now)
                chosen_ids = set(ids)  # critical jobs are not rate limited, nor counted
                rate_groups = {j.id: budget.group(j) for j in self._candidates.get(queue_id, ())
                               if j.id in chosen_ids and not j.critical}
            jobs = await self.store.job_mark_running_many(
                queue=queue_id, ids=ids, now=now, owner=self.owner,
                heartbeat_seconds=config.heartbeat_timeout_seconds, rate_groups=rate_groups,
                # a merging queue may have appended payloads since the fetch: re-read
                known=None if config.merge_by_ordering_key else
                {j.id: j for j in self._candidates.get(queue_id, ())})
            for job in jobs:
                self.batch[job.key] = Entry(job=job, deadline=job.deadline)
            launched.extend(jobs)
        return launched

    def _launch(self, jobs: Sequence[Job]) -> None:
        launches = []
        for job in jobs:
            target = self._runtimes[job.queue].target
            assert target is not None
            launches.append((target, job))
        self.launcher.launch_many(launches)

    async def flush_launches(self) -> None:
        """Record the launches that finished so far (see :class:`Launcher`)."""
        await self.launcher.flush()

    async def drain(self) -> None:
        """Wait until every launch of earlier ticks has finished and been recorded
        (and a vacuum under way has ended)."""
        await self.launcher.drain()
        if self._vacuum is not None:
            await self._vacuum

    def stop(self) -> None:
        """Stop launching new jobs (graceful shutdown); running jobs stay running."""
        self._stopping = True


async def _listed(fetching: Awaitable[list[Job]]) -> list[list[Job]]:
    return [await fetching]


def _free(capacity: int | None, running: Iterable[Job], limit: int) -> int:
    if capacity is None:
        return limit
    used: int = sum(j.weight for j in running)
    return max(min(capacity - used, limit), 0)


def _outcome_from_launch(result: LaunchResult) -> Outcome:
    done = result.outcome
    if done is None:
        error = result.error or JobError(kind=ErrorKind.TRANSPORT)
        return Outcome(status=JobState.FAILED.value, response={"source": "launch"},
                       error=replace(error, data={"kind": error.kind, "detail": error.detail}))
    assert isinstance(done, Completed)
    if done.status == "succeeded":
        return Outcome(status=JobState.SUCCEEDED.value, result=done.result,
                       response={"source": "target"})
    raw = done.error if isinstance(done.error, dict) else {"detail": str(done.error or "")}
    raw = {"kind": done.kind, **raw}
    detail = raw.get("detail") or raw.get("message") or ""
    return Outcome(status=JobState.FAILED.value, result=done.result, response={"source": "target"},
                   error=JobError(kind=str(raw.get("kind") or ErrorKind.RESPONSE_FAILED),
                                  detail=str(detail), retryable=done.retryable is not False,
                                  data=raw))


def _outcome_from_row(row: InboxRow) -> Outcome:
    if row.status == "succeeded":
        return Outcome(status=JobState.SUCCEEDED.value, result=row.result,
                       response={"source": row.source})
    if row.status == "cancelled":
        return Outcome(status=JobState.CANCELLED.value, error=JobError(
            kind="cancelled", detail="cancelled by a user", retryable=False))
    raw = row.error if isinstance(row.error, dict) else {}
    detail = raw.get("detail") or raw.get("message") or (row.error if isinstance(row.error, str)
                                                         else "")
    error = JobError(kind=str(raw.get("kind") or ErrorKind.RESPONSE_FAILED), detail=str(detail),
                     retryable=row.retryable is not False,
                     data=row.error if not isinstance(row.error, str) else None)
    return Outcome(status=JobState.FAILED.value, result=row.result, error=error,
                   response={"source": row.source})

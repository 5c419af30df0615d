"""The tick as a plan (docs/internals.md, "The tick"): what one reconcile pass does,
step by step, over the batch and what has arrived, with no I/O of its own.

Each step is a generator (:data:`~hipq.engine.requests.Plan`): it yields requests
(:mod:`hipq.engine.requests`: store calls, reads of due jobs, launches, in-tick runs)
and receives their answers. The executor (:mod:`hipq.engine.executor`) runs them,
and its stage table says which steps run in turn and which side by side (step 3's
writes beside steps 1, 2, 4 and 5); a test drives a step by hand with answers of its
own (``tests/unit/test_tick_plan.py``). The steps, in order:

0. :meth:`TickPlan.arrived`: renew leases, adopting the running jobs of queues gained
   (:mod:`.leases`); apply what launches said and the responses from the inbox
   (:mod:`.inbox`); end the tries whose deadline passed (``timeout``); once a second,
   sweep responses nothing claims and expire queued jobs past ``expires_at``.
1. and 2. :meth:`TickPlan.select` (:mod:`.selection`): per held, unpaused queue
   with a target, the due jobs in queue order, bounded by the free capacity, then the
   queue's throttler: launch, reschedule or drop.
3. :meth:`TickPlan.decide` and :meth:`TickPlan.persist`: the ended tries' fates on
   copies (:mod:`.fates`, retry strategies included), persisted in one transaction;
   what no longer runs leaves the batch.
4. :meth:`TickPlan.claim` (:mod:`.claims`): the chosen jobs marked running, one
   statement per queue, and held; a queue that runs its tries within the tick
   (:mod:`.inline`) runs them first and archives its successes.
5. :meth:`TickPlan.launch`: the new tries sent in the background (:mod:`.launcher`).

Then :meth:`TickPlan.finish`: the archives written behind by earlier ticks are
counted, the partner's word saved (and what the owner sees of its partners, once a
second: :mod:`.seen`), queues handed over.

Invariants: a job is never re-run from memory (once it leaves ``running`` it is
saved and dropped, and runs again only after being fetched); no transaction is held
across network I/O; a tick costs O(what changed): the new batch, the responses that
arrived, the deadlines that passed; never O(backlog), never O(running).

Failure modes: a crash loses only the batch; the next owner adopts running jobs
from the database. A database error aborts the tick; the next tick starts from the
database again.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from hipq.engine import claims, fates, selection
from hipq.engine.decide import outcome_from_launch, outcome_timeout
from hipq.engine.held import HeldTry
from hipq.engine.leases import adopt
from hipq.engine.requests import Answers, Collect, Launch, Moved, Plan, TakeAnswers, call
from hipq.engine.result import Counters, ReconcileResult
from hipq.engine.selection import Selection, scope
from hipq.jobs import Job
from hipq.store.records import Change, ChangeKind, QueueRecord
from hipq.targets.interface import Target

if TYPE_CHECKING:
    from hipq.engine.reconciler import Reconciler

log = logging.getLogger(__name__)

EXPIRY_SWEEP_LIMIT = 1000  # queued jobs past expires_at archived per sweep
SWEEP_EVERY = timedelta(seconds=1)  # backlog sweeps at most this often


class TickPlan:
    """One tick over the engine's state (the :class:`~hipq.engine.reconciler.Reconciler`'s
    batch, leases, inbox, partner's word...) at ``now``."""

    def __init__(self, engine: Reconciler, now: datetime) -> None:
        self.engine = engine
        self.now = now
        self.counters = Counters()
        self.queues: dict[str, QueueRecord] = {}
        self.handing_over: list[str] = []  # releasing, every launch recorded
        self.selections: list[Selection] = []
        self.changes: list[Change] = []
        self.to_launch: list[Job] = []
        self.result: ReconcileResult | None = None

    # -- step 0 ------------------------------------------------------------------------

    def arrived(self) -> Plan[None]:
        """Step 0: leases (adoptions), what launches and responses said, deadlines."""
        engine, now, counters = self.engine, self.now, self.counters
        self.queues = {q.id: q for q in (yield call("queue_list"))}
        yield from self._leases()
        yield from engine.partner.refresh(engine.held, self.queues, now)
        answers = yield TakeAnswers(releasing=frozenset(engine.leases.releasing))
        # what this tick applies and persists of these is all there is: released at its end
        self.handing_over = sorted(answers.idle)
        self._apply_launches(answers)
        yield from engine.inbox.apply(engine.batch, now, counters)
        for held in engine.batch.overdue(now):
            assert held.deadline is not None
            engine.batch.end(held, outcome_timeout(held.deadline))
            counters.add("timed_out")
        if engine.swept_at is None or now - engine.swept_at >= SWEEP_EVERY:
            engine.swept_at = now  # once a second: unclaimed responses, expired jobs
            yield from engine.inbox.sweep(engine.batch, now, counters)
            for job in (yield call("job_expired_sweep", now=now, limit=EXPIRY_SWEEP_LIMIT)):
                counters.expired(job.queue, 1)

    def _leases(self) -> Plan[None]:
        engine, now = self.engine, self.now
        partners = engine.budgets.partners
        units = {q: "partner " + r.spec.partner for q, r in self.queues.items()
                 if r.spec.partner is not None and r.spec.partner in partners}
        change = yield engine.leases.refresh(self.queues, now, units)
        for queue in change.lost:
            engine.batch.drop_queue(queue)
            engine.rates.drop_queue(queue)
            engine.budgets.drop_queue(queue)
        for queue in change.gained:
            record = self.queues.get(queue)
            if record is not None and record.spec.rate_limit is not None:
                yield call("launch_events_restamp", queue=queue, at=now)
            self.counters.add("adopted", (yield from adopt(
                queue=queue, owner=engine.owner, now=now, add=self._adopted)))

    def _adopted(self, held: HeldTry) -> None:
        """An adopted try: a waiting one lets its job go at once (an adoption may
        bring a whole running set; see :meth:`Batch.add`)."""
        engine = self.engine
        runtime = engine.runtimes.cached(held.queue)
        if runtime is not None and held.job is not None:
            held.scope = scope(runtime.spec, held.job)
        engine.batch.add(held, keep_job=False)
        engine.inbox.watch(held)

    def _apply_launches(self, answers: Answers) -> None:
        """Outcomes targets gave at once (and failed launches), straight from memory;
        budgets the partner said were spent pause their scopes."""
        batch, applied = self.engine.batch, 0
        for job, spent in answers.spent:
            self._spent(job, spent)
        for job, headers in answers.reports:
            self._reported(job, headers)
        for result in answers.outcomes:
            job = result.job
            spent = getattr(result.outcome, "spent", None)
            if spent is not None:
                self._spent(job, spent)
            headers = getattr(result.outcome, "budget", None)
            if headers:
                self._reported(job, headers)
            held = batch.get((job.queue, job.id))
            if held is None or held.attempt != job.attempt or held.outcome is not None:
                continue  # timed out or cancelled meanwhile: the first outcome stands
            batch.end(held, outcome_from_launch(result.outcome, result.error))
            applied += 1
        self.counters.add("responses_applied", applied)

    def _spent(self, job: Job, spent: Any) -> None:
        engine = self.engine
        runtime = engine.runtimes.cached(job.queue)
        if runtime is not None and job.queue in engine.held:
            spec = runtime.spec
            engine.partner.spent(spec, scope(spec, job), spent, self.now)

    def _reported(self, job: Job, headers: Any) -> None:
        """An answer's rate-limit headers set its partner's buckets."""
        engine = self.engine
        runtime = engine.runtimes.cached(job.queue)
        if runtime is not None and job.queue in engine.held:
            engine.budgets.reported(runtime.spec, job, headers, self.now)

    # -- steps 1 and 2 -----------------------------------------------------------------

    def select(self) -> Plan[None]:
        """Steps 1 and 2: per held queue, its due jobs and its throttler's choice."""
        engine = self.engine
        for queue_id in engine.budgets.order(engine.held):
            record = self.queues[queue_id]
            runtime = selection.runtime_of(engine.runtimes, record)
            if runtime is None or record.paused or runtime.target is None or engine.stopping:
                continue
            if not engine.leases.whole(queue_id):  # a partner's queues move together
                continue
            chosen = yield from selection.select_queue(engine, runtime, self.now, self.counters)
            if chosen is not None:
                self.selections.append(chosen)

    # -- step 3 ------------------------------------------------------------------------

    def decide(self) -> Plan[None]:
        """Step 3's decisions over the tries that ended or were extended (a failed
        try's job read back first, for its retry strategy)."""
        engine = self.engine
        changed = engine.batch.changed()
        yield from engine.jobs.for_retries(changed)
        self.changes = fates.changes(engine, changed, self.queues, self.now, self.counters)
        self.counters.ended = self.changes

    def persist(self) -> Plan[None]:
        """Step 3's writes, in one transaction; then the entries that ended, were
        re-queued or are no longer ours leave the batch."""
        if not self.changes:
            return
        # beside a write of launch confirmations: a row it changes meanwhile is sent
        # again by persist_batch (PostgreSQL leaves alone a row another transaction
        # changed under the statement; see PostgresStore.persist_batch)
        batch = self.engine.batch
        applied = yield call("persist_batch", changes=self.changes, owner=self.engine.owner,
                             now=self.now)
        leaving: list[tuple[str, str]] = []
        extend = ChangeKind.EXTEND
        for change in self.changes:
            key = (change.queue, change.id)
            if change.kind is extend and key in applied:
                batch.settle(key, change.deadline)
            else:  # ended, re-queued, or no longer ours: it leaves the batch either way
                leaving.append(key)
        batch.remove_many(leaving)

    # -- step 4 ------------------------------------------------------------------------

    def claim(self) -> Plan[None]:
        """Step 4: the chosen jobs marked running and held (a job step 3 re-queues is
        not claimed in the same tick); those of a queue that runs its tries within the
        tick run first (:mod:`.inline`)."""
        launched: list[Job] = []
        if not self.engine.stopping:
            requeued = {(c.queue, c.id) for c in self.changes if c.kind is ChangeKind.REQUEUE}
            for chosen in self.selections:
                spec = chosen.runtime.spec
                ids = [i for i in chosen.launch if (spec.id, i) not in requeued]
                if ids:
                    ran, held = yield from claims.claim(self.engine, chosen, ids, self.now,
                                                        self.counters)
                    self.engine.partner.launched(spec.id, len(ran), self.now)
                    launched.extend(ran)
                    self.to_launch.extend(held)
        self.counters.add("launched", len(launched))
        self.counters.launched_jobs = launched

    # -- step 5 ------------------------------------------------------------------------

    def launch(self) -> Plan[None]:
        """Step 5: the new tries are sent in the background."""
        if self.to_launch:
            yield Launch(_targets_of(self.engine, self.to_launch))

    # -- the tick's end ------------------------------------------------------------------

    def finish(self) -> Plan[None]:
        engine, now, counters = self.engine, self.now, self.counters
        counters.ran((yield Collect()))  # the in-tick archives of earlier ticks
        engine.partner.stamp_held(now)
        engine.partner.keep_budgets(now, force=bool(self.handing_over))
        yield from engine.partner.save(now)
        yield from engine.seen.save(now, engine.held, engine.runtimes)  # once a second
        if self.handing_over:  # scale-out: after the persist, see .leases
            queues = self.handing_over
            counters.ran((yield Collect(tuple(queues))))  # nothing of theirs left unwritten
            for queue in queues:
                yield from engine.rates.write_back(queue)
            yield engine.leases.release(queues)
            for queue in queues:
                engine.batch.drop_queue(queue)
                engine.budgets.drop_queue(queue)
        wakes = [t for t in (engine.partner.next_end(engine.held, now),
                             engine.partner.next_group(now), engine.budgets.next_room(now))
                 if t is not None]
        counters.wake_at = min(wakes, default=None)  # a pause ends, a paced group is due
        result = self.result = counters.result()
        if result.changed:
            log.info("reconcile tick: %s", dict(counters.values), extra={"action": "tick"})
        # the rows moved through the jobs table (a try run within its tick moves once)
        yield Moved(result.launched + result.finished - result.ran_inline)


def _targets_of(engine: Reconciler, jobs: list[Job]) -> list[tuple[Target, Job]]:
    launches = []
    targets: dict[str, Target] = {}  # per queue
    for job in jobs:
        target = targets.get(job.queue)
        if target is None:
            runtime = engine.runtimes.cached(job.queue)
            assert runtime is not None
            assert runtime.target is not None
            target = targets[job.queue] = runtime.target
        launches.append((target, job))
    return launches


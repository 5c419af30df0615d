"""The reconcile loop: ``run_once()`` does one tick; the daemon calls it again
(docs/internals.md, "How it works").

The :class:`Reconciler` holds the engine's state between ticks: the **current
batch** (:mod:`hipq.engine.batch`), this daemon's in-memory view of the running
jobs of the queues it holds a lease on, and the parts that keep what a tick reads
(:mod:`.leases`, :mod:`.inbox`, :mod:`.partner_word`, :mod:`.rates`, :mod:`.runtimes`).
The database is authoritative; the batch is only ever changed after the database
says so.

A tick is a plan and an executor: :class:`~hipq.engine.plan.TickPlan` decides, step
by step (0 to 5), and yields what it needs done; the
:class:`~hipq.engine.executor.Executor` is the one part that awaits the store, and
its stage table says what runs beside what. The launcher
(:mod:`hipq.engine.launcher`) sends the new tries in the background and records
what they said.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from hipq.clock import Clock
from hipq.config import ReconcileConfig, ResponsesConfig
from hipq.engine.batch import Batch
from hipq.engine.budgets import Budgets
from hipq.engine.executor import ArchivesInFlight, Executor, PagesAhead
from hipq.engine.inbox import Inbox
from hipq.engine.jobs_on_demand import JobsOnDemand
from hipq.engine.launcher import Launcher
from hipq.engine.leases import Leases
from hipq.engine.partner_word import PartnerWord
from hipq.engine.plan import TickPlan
from hipq.engine.rates import RateLog
from hipq.engine.result import ReconcileResult
from hipq.engine.runtimes import Runtimes, TargetFactory
from hipq.engine.seen import Seen
from hipq.spec import PartnerSpec
from hipq.store import Store
from hipq.targets.registry import Targets


class Reconciler:
    def __init__(self, store: Store, *, clock: Clock, owner: str,
                 config: ReconcileConfig | None = None,
                 responses: ResponsesConfig | None = None,
                 targets: TargetFactory | None = None,
                 on_wake: Callable[[], None] | None = None,
                 partners: Mapping[str, PartnerSpec] | None = None) -> None:
        self.clock = clock
        self.owner = owner
        self.config = config or ReconcileConfig()
        self.batch = Batch()
        self.jobs = JobsOnDemand(self.batch)  # jobs the batch let go, read back
        self.runtimes = Runtimes(targets or Targets(), partners)
        self.leases = Leases(owner=owner, lease_seconds=self.config.lease_seconds)
        self.inbox = Inbox(buffer_seconds=(responses or ResponsesConfig()).buffer_seconds,
                           heartbeat_seconds=self._heartbeat_seconds)
        self.rates = RateLog()  # own rate-limited launches (see .rates)
        self.budgets = Budgets(partners)  # declared partners' budgets
        self.partner = PartnerWord(self.budgets)  # pauses, learned limits, held counts
        self.seen = Seen(self.budgets, owner)  # what it sees of its partners, for every daemon
        self.launcher = Launcher(store, clock=clock, owner=owner,
                                 concurrency=self.config.launch_concurrency, on_wake=on_wake,
                                 on_answered=self.rates.answered)
        self.executor = Executor(store, self.launcher, vacuum_every=self.config.vacuum_every)
        self.swept_at: datetime | None = None  # the last sweep of the backlogs
        self.stopping = False  # a graceful stop: nothing new is launched

    @property
    def held(self) -> set[str]:
        """The queues this daemon holds a lease on."""
        return self.leases.held

    @property
    def pages_ahead(self) -> PagesAhead:
        """In-tick runs' next pages, read ahead (the executor's)."""
        return self.executor.pages_ahead

    @property
    def archives(self) -> ArchivesInFlight:
        """In-tick runs' archives, written behind (the executor's)."""
        return self.executor.archives

    async def run_once(self) -> ReconcileResult:
        """One tick: the steps of docs/internals.md ("The tick"), in order."""
        return await self.executor.tick(TickPlan(self, self.clock.now()))

    async def renew_leases(self) -> None:
        """Heartbeat and renew the leases now, beside a tick (the lease timer's job)."""
        await self.executor.ask(self.leases.renew(self.clock.now()))

    async def write_back_rates(self) -> None:
        """At shutdown, before every lease is released: :meth:`.RateLog.write_back`."""
        for queue in self.rates.queues():
            await self.executor.run(self.rates.write_back(queue))

    def _heartbeat_seconds(self, queue: str) -> float | None:
        runtime = self.runtimes.cached(queue)
        return None if runtime is None else runtime.spec.heartbeat_timeout_seconds

    async def drain(self) -> None:
        """Wait until every launch of earlier ticks has finished and been recorded
        (and a vacuum under way, pages read ahead and archives written behind, have
        ended)."""
        await self.executor.drain()

    def stop(self) -> None:
        """Stop launching new jobs (graceful shutdown); running jobs stay running."""
        self.stopping = True
        self.leases.stopping = True
        self.executor.stop()

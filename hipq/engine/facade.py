"""The engine as the daemon and the service see it: one object, :class:`Engine`
(docs/internals.md, "The engine's face").

The daemon starts it, tells it what happened (work arrived, responses written, the
interval passed, the cluster changed) and stops it; the service and the Kafka
consumer tell it of the work and the responses they wrote (:class:`EngineLink`) and
ask it whether it holds a try. Whether a tick runs now or soon is the engine's
decision alone, taken in one place (:meth:`Engine._after`, over its
:class:`~hipq.engine.tick_driver.TickDriver`): at once after a full batch, tries run
within the tick, a backlog of responses, or queues gained; at a partner's pause's
end, on the clock's timer; else when woken (debounced) or at the interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from hipq.clock import Clock, wait_for
from hipq.config import ReconcileConfig, ResponsesConfig
from hipq.engine.reconciler import Reconciler
from hipq.engine.requests import call
from hipq.engine.result import ReconcileResult
from hipq.engine.runtimes import TargetFactory
from hipq.engine.tick_driver import TickDriver
from hipq.errors import HipqError, TransientStoreError
from hipq.spec import PartnerSpec
from hipq.store import InboxRow, Store

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 10.0  # in-flight launches finish and are recorded within this

# before each tick (the queues held): whether more waits, a tick due at once after it
BeforeTick = Callable[[frozenset[str]], Awaitable[bool]]
AfterTick = Callable[[ReconcileResult, float], None]  # each tick's result and seconds


class EngineLink(Protocol):
    """What the service and the response consumers tell the engine."""

    def work_arrived(self) -> None:
        """An enqueue or a response reached this process (a tick soon, here and at
        the queue's owner)."""

    def responses_arrived(self) -> None:
        """Responses were written to the inbox (read at the next tick)."""

    def responses_written(self, rows: Sequence[InboxRow]) -> None:
        """These inbox rows were written by this process and committed (applied at the
        next tick without a read)."""

    def live_try(self, correlation_key: str) -> tuple[str, int] | None:
        """(token, attempt) of the try this engine holds under the key, if any."""


class Peers(Protocol):
    """The other daemons sharing the database (:class:`hipq.store.notify.Notifier`)."""

    def notify(self) -> None: ...


class Engine:
    def __init__(self, store: Store, *, clock: Clock, owner: str, config: ReconcileConfig,
                 responses: ResponsesConfig | None = None, targets: TargetFactory | None = None,
                 before: BeforeTick | None = None, after: AfterTick | None = None,
                 partners: Mapping[str, PartnerSpec] | None = None) -> None:
        self.config = config
        self.clock = clock
        self.owner = owner
        self.reconciler = Reconciler(store, clock=clock, owner=owner, config=config,
                                     responses=responses, targets=targets, on_wake=self.wake,
                                     partners=partners)
        self.reconciler.inbox.use_events()  # every writer of responses here says so
        self._driver = TickDriver(self._tick, clock=clock, debounce=config.debounce_seconds)
        self._before = before
        self._after_tick = after
        self._peers: Peers | None = None
        self._held_before: frozenset[str] = frozenset()
        self.ticked = asyncio.Event()  # set once a tick ran (hipq run settles its heap then)

    # -- the daemon's side ---------------------------------------------------------------

    def start(self, *, peers: Peers | None = None) -> None:
        """The ticks begin, the first one at once; ``peers`` hear of work arriving."""
        self._peers = peers
        self._driver.start()
        self._driver.due()

    def wake(self) -> None:
        """A tick soon (debounced); safe to call often and from callbacks. A no-op with
        ``reconcile.early_wake: false`` (ticks only at the interval)."""
        if self.config.early_wake:
            self._driver.wake()

    def interval(self) -> None:
        """The reconcile interval passed (APScheduler's periodic job): a tick now."""
        self._driver.due()

    def members_changed(self) -> None:
        """A daemon joined or left: rebalance the leases at a tick now."""
        self.reconciler.leases.force = True
        self._driver.due()

    async def leases_due(self) -> None:
        """Every third of ``lease_seconds``: a tick renews and rebalances the leases; a
        long tick in progress has them renewed beside it, so none lapses."""
        self.reconciler.leases.force = True
        if self._driver.running:
            try:
                await self.reconciler.renew_leases()
            except HipqError as exc:
                log.warning("lease renewal failed: %s", exc, extra={"action": "lease_error"})
            except asyncio.CancelledError:
                if self.reconciler.stopping:  # the shutdown cut it short: they are released
                    return
                raise
        self._driver.due()

    @property
    def held(self) -> frozenset[str]:
        """The queues this daemon holds a lease on."""
        return frozenset(self.reconciler.held)

    async def tick(self) -> None:
        """Ask for a tick now and wait until it ran (tests and embedders)."""
        await self._driver.tick_now()

    async def stop(self) -> None:
        """No new job is launched; the tick in progress ends, and no other starts."""
        self.reconciler.stop()
        await self._driver.stop()

    async def close(self) -> None:
        """After :meth:`stop`: in-flight launches finish and are recorded (bounded by a
        grace period), a last persist-only tick runs, the leases are released. Running
        jobs stay running in the database for the next owner."""
        reconciler = self.reconciler
        try:
            try:
                await wait_for(self.clock, reconciler.drain(), SHUTDOWN_GRACE_SECONDS)
            except TimeoutError:
                log.warning("some launches were still in flight at shutdown")
            started = self.clock.monotonic()
            result = await reconciler.run_once()
            if self._after_tick is not None:
                self._after_tick(result, self.clock.monotonic() - started)
            await reconciler.write_back_rates()
            await reconciler.executor.ask(call("lease_release_all", owner=self.owner))
            await reconciler.executor.ask(call("daemon_leave", owner=self.owner))
        except HipqError as exc:
            log.warning("shutdown could not persist everything: %s", exc)

    # -- the service's side (EngineLink) ---------------------------------------------------

    def work_arrived(self) -> None:
        """Its queue may be ours or another daemon's: wake both (the others only when
        there are: a daemon alone sends no NOTIFY; one that joins is seen at the next
        heartbeat)."""
        self.wake()
        if self._peers is not None and len(self.reconciler.leases.live) > 1:
            self._peers.notify()

    def responses_arrived(self) -> None:
        self.reconciler.inbox.arrived()

    def responses_written(self, rows: Sequence[InboxRow]) -> None:
        self.reconciler.inbox.wrote(rows)

    def live_try(self, correlation_key: str) -> tuple[str, int] | None:
        held = self.reconciler.batch.by_key(correlation_key)
        return None if held is None else (held.token, held.attempt)

    # -- the ticks -----------------------------------------------------------------------

    async def _tick(self) -> bool:
        """One reconcile pass, run by the driver; never raises. True when the next is
        due at once."""
        started = self.clock.monotonic()
        try:
            more = False if self._before is None else await self._before(self.held)
            result = await self.reconciler.run_once()
        except TransientStoreError as exc:
            log.warning("reconcile tick skipped: %s", exc, extra={"action": "tick_error"})
            return False
        except Exception:
            log.exception("reconcile tick failed", extra={"action": "tick_error"})
            return False
        finally:
            self.ticked.set()
        if self._after_tick is not None:
            self._after_tick(result, self.clock.monotonic() - started)
        return self._after(result) or more

    def _after(self, result: ReconcileResult) -> bool:
        """Tick now or soon: True when the next tick is due at once (it launched a full
        batch; tries ended within it: the capacity they took is free again, and no
        answer will wake the next; step 0 left new responses (its bound per tick);
        queues were gained, whose intake and jobs wait). A partner's pause's end asks
        for a tick then."""
        held = self.held
        gained, self._held_before = bool(held - self._held_before), held
        if result.wake_at is not None:
            try:
                self._driver.due_in(max((result.wake_at - self.clock.now()).total_seconds(),
                                        0.0))
            except Exception:  # never the driver's end: the periodic tick carries on
                log.exception("could not schedule a tick", extra={"action": "tick_error"})
        return (gained or result.launched >= self.config.fetch_limit
                or result.ran_inline > 0 or result.archiving > 0
                or self.reconciler.inbox.backlog)

"""The daemon: store + reconciler + APScheduler, with a graceful shutdown.

``Daemon.run(stop=event, ready=event)`` opens the store, migrates it, applies the
YAML queues (an upsert), and starts the parts: the API, the response consumer, and
the :class:`~hipq.engine.driver.TickDriver`, the one task that runs reconcile
ticks. APScheduler fires the periodic tick (every ``reconcile.interval_seconds``),
the lease refresh, archive pruning and recurring schedules; work arriving in this
process wakes the driver early (debounced). On ``stop`` the driver finishes its
tick and ends, in-flight launches finish and are recorded, a final persist-only
tick runs, the leases are released and the pool closed; running jobs stay running
in the database for the next owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
import uuid
from collections.abc import Coroutine, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import TYPE_CHECKING, Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from hipq import heap, tracing
from hipq.api import ApiDeps, ApiServer
from hipq.clock import Clock, SystemClock
from hipq.config import Settings
from hipq.engine import Reconciler
from hipq.engine.driver import TickDriver
from hipq.errors import ConfigError, HipqError, TransientStoreError
from hipq.intake import Intake
from hipq.metrics import Metrics
from hipq.responses.signing import load_signer
from hipq.schedules import POLL_SECONDS as SCHEDULE_POLL_SECONDS
from hipq.schedules import Schedules, open_schedules
from hipq.service import Hipq
from hipq.store import InboxRow, Store, open_store
from hipq.store.notify import INTAKE, MEMBERS, WAKE, Notifier
from hipq.targets import Target, Targets
from hipq.targets.http import HttpClient
from hipq.tick_log import log_failures

if TYPE_CHECKING:
    from hipq.responses.kafka_consumer import KafkaResponseConsumer

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 10.0
PRUNE_INTERVAL_SECONDS = 3600.0
PRUNE_BATCH = 1000
INTAKE_WATCH_SECONDS = 0.25  # SQLite: how often the intake is looked at for new rows


GC_YOUNG_THRESHOLD = 50_000  # allocations between young-generation collections


def settle_heap() -> None:
    """Before the daemon opens (what the imports and the settings made) and again
    once its first tick (which adopts the running jobs) is done (the pool, the
    adopted tries): what startup allocated lives as long as the process, so it
    leaves the cyclic collector's scans (``gc.freeze``), and young collections run
    every 50,000 allocations instead of 700. A tick allocates a few objects per job
    of its batch; with the default thresholds the collector ran every few hundred
    jobs and its older-generation passes walked every live job. Memory held by
    cyclic garbage stays bounded by the (larger) threshold; the C heap's free pages
    go back to the system (:func:`hipq.heap.release`). Called by ``hipq run``, not
    by embedders."""
    gc.collect()
    heap.release()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def make_owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Daemon:
    """``open()`` then ``run(stop=...)``; every resource it opens is registered on one
    :class:`~contextlib.AsyncExitStack`, closed in reverse order by :meth:`shutdown`."""

    def __init__(self, settings: Settings, *, clock: Clock | None = None,
                 memory_targets: Mapping[str, Target] | None = None,
                 migrate: bool = True) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.memory_targets = memory_targets
        self.migrate = migrate
        self.owner = make_owner_id()
        self._stack = AsyncExitStack()
        self._driver = TickDriver(self._tick, clock=self.clock,
                                  debounce=settings.reconcile.debounce_seconds)
        self._scheduler: AsyncIOScheduler | None = None
        self._opened: _Opened | None = None
        self.api_port: int | None = None  # the bound port once the API serves
        self.schedules: Schedules | None = None  # docs/configuration.md
        self.metrics = Metrics(monotonic=self.clock.monotonic)
        self.notifier: Notifier | None = None  # scale-out: LISTEN/NOTIFY (PostgreSQL)
        self._intake_due = True  # look at the intake at the next tick (SPEC 16)
        self._held_before: frozenset[str] = frozenset()
        self.ticked = asyncio.Event()  # set once a tick ran (hipq run settles its heap then)

    # the parts, once open() has run
    @property
    def parts(self) -> _Opened:
        if self._opened is None:
            raise RuntimeError("the daemon is not open: call open() first")
        return self._opened

    @property
    def store(self) -> Store:
        return self.parts.store

    @property
    def service(self) -> Hipq:
        return self.parts.service

    @property
    def reconciler(self) -> Reconciler:
        return self.parts.reconciler

    @property
    def kafka_consumer(self) -> KafkaResponseConsumer | None:
        return self.parts.kafka_consumer

    @property
    def api(self) -> ApiServer | None:
        return self.parts.api

    async def open(self) -> Hipq:
        """Open and migrate the store, apply the YAML queues; return the service."""
        if self._opened is not None:
            return self._opened.service
        try:
            self._opened = await self._open_parts()
        except BaseException:
            await self._stack.aclose()
            raise
        return self._opened.service

    async def _open_parts(self) -> _Opened:
        store = await open_store(self.settings.database.url,
                                 pool_size=self.settings.database.pool_size)
        self._stack.push_async_callback(store.close)
        if self.migrate:
            await store.migrate()
        else:
            await store.check_schema()
        # what hipq_enqueue() refuses past (docs/from-your-database.md, "Limits")
        await store.intake_limit_set(self.settings.api.max_body_bytes)
        service = Hipq(store, clock=self.clock, on_work=self._work_arrived,
                       on_enqueued=self.metrics.enqueued_jobs,
                       on_response=self._responses_arrived,
                       on_written=self._responses_written, live_try=self._live_try)
        for queue in self.settings.queues:
            await service.create_queue(queue)
        signer = await load_signer(store, self.settings.signing_key)
        self.schedules = await open_schedules(service, self.settings, clock=self.clock)
        http = HttpClient(signer=signer, public_url=self.settings.api.public_url)
        self._stack.push_async_callback(http.close)
        producer, consumer = None, None
        if self.settings.kafka is not None:  # both connect lazily, retrying with back-off
            from hipq.responses.kafka_consumer import KafkaResponseConsumer  # aiokafka: 5 MB
            from hipq.targets.kafka_target import KafkaProducer

            producer = KafkaProducer(self.settings.kafka, clock=self.clock)
            self._stack.push_async_callback(producer.close)
            consumer = KafkaResponseConsumer(self.settings.kafka, store, clock=self.clock,
                                             on_work=self._work_arrived,
                                             on_written=self._responses_written,
                                             signer=signer)
        api = None
        if self.settings.api.enabled:
            api = ApiServer(ApiDeps(service=service, config=self.settings.api, signer=signer,
                                    schedules=self.schedules, metrics=self.metrics,
                                    declared_queues={q.id: q for q in self.settings.queues},
                                    trace_url=self.settings.dashboard.trace_url))
        reconciler = Reconciler(
            store, clock=self.clock, owner=self.owner, config=self.settings.reconcile,
            responses=self.settings.responses, on_wake=self.wake,
            targets=Targets(memory=self.memory_targets, http=http, kafka=producer))
        reconciler.inbox.use_events()  # every writer of responses below says so
        return _Opened(store=store, service=service, reconciler=reconciler,
                       intake=Intake(service, store, self.clock,
                                     max_bytes=self.settings.api.max_body_bytes),
                       http=http, api=api,
                       kafka_consumer=consumer)

    async def run(self, *, stop: asyncio.Event, ready: asyncio.Event | None = None) -> None:
        await self.open()
        try:
            await self._start()
            log.info("hipq running as %s (database %s, event loop %s)", self.owner,
                     self.settings.database.url.split("@")[-1],
                     type(asyncio.get_running_loop()).__module__.split(".")[0],
                     extra={"action": "start"})
            if ready is not None:
                ready.set()
            await stop.wait()
        finally:
            await self.shutdown()

    async def _start(self) -> None:
        """Clients, the API, the loop, the consumer; each registers its own stop.
        Unwinding runs them backwards: the consumer, the loop and the API stop first,
        then the last tick persists (:meth:`_finish`), then the clients close."""
        parts = self.parts
        await self._start_notifier()  # stops after _finish: its last word is a NOTIFY
        self._stack.push_async_callback(self._finish)
        await parts.http.start()
        if parts.api is not None:
            try:
                self.api_port = await parts.api.start()
            except OSError as exc:
                raise ConfigError(f"api: cannot listen on {self.settings.api.host}:"
                                  f"{self.settings.api.port}: {exc.strerror}") from None
            self._stack.push_async_callback(parts.api.stop)
            if parts.http.public_url is None:
                parts.http.public_url = parts.api.url
        self._driver.start()
        self._stack.push_async_callback(self._driver.stop)
        self._driver.due()  # the first tick at once
        if self.store.dialect == "sqlite":  # producers of other processes: no NOTIFY
            self._spawn_first(self._watch_intake())
        self._start_scheduler()
        self._stack.callback(self._stop_scheduler)
        if parts.kafka_consumer is not None:
            parts.kafka_consumer.start()
            self._stack.push_async_callback(parts.kafka_consumer.stop)

    def _start_scheduler(self) -> None:
        scheduler = AsyncIOScheduler(timezone=UTC)
        scheduler.add_job(self._periodic_tick, "interval", id="reconcile",
                          seconds=self.settings.reconcile.interval_seconds,
                          max_instances=1, coalesce=True, misfire_grace_time=None)
        # leases on their own cadence, whatever interval_seconds is (scale-out)
        scheduler.add_job(self._lease_job, "interval", id="leases",
                          seconds=self.settings.reconcile.lease_seconds / 3,
                          max_instances=1, coalesce=True, misfire_grace_time=None)
        scheduler.add_job(self.prune, "interval", id="prune", seconds=PRUNE_INTERVAL_SECONDS,
                          max_instances=1, coalesce=True)
        if self.schedules is not None and self.schedules.schedules:  # docs/configuration.md
            scheduler.add_job(self.schedules.run_once, "interval", id="schedules",
                              seconds=SCHEDULE_POLL_SECONDS, max_instances=1, coalesce=True)
            self._spawn_first(self.schedules.run_once())
        scheduler.start()
        self._scheduler = scheduler

    async def _periodic_tick(self) -> None:
        """APScheduler's reconcile job: ask the driver for a tick (it runs there);
        it also looks at the intake (polling, whatever the notifications said)."""
        self._intake_due = True
        self._driver.due()

    async def _watch_intake(self) -> None:
        """SQLite: a producer in another process writes the intake without a
        notification; its largest row id (one index probe) is looked at every
        :data:`INTAKE_WATCH_SECONDS`, and a new row wakes the tick."""
        seen = 0
        while True:
            await asyncio.sleep(INTAKE_WATCH_SECONDS)  # noqa: TID251 (real-time polling)
            try:
                last = await self.store.intake_last_id()
            except HipqError:
                continue
            if last > seen:
                seen = last
                self._intake_due = True
                self.wake()

    def _spawn_first(self, first: Coroutine[Any, Any, object]) -> None:
        """Run a scheduler job's first pass now, owned: cancelled at shutdown."""
        task = asyncio.create_task(first)
        self._stack.push_async_callback(_cancelled, task)

    # -- scale-out: lease cadence and wake-ups across daemons ---------------------------

    async def _lease_job(self) -> None:
        """Every third of ``lease_seconds``: a tick renews and rebalances the leases;
        if a tick is running (a long one), renew beside it so no lease lapses."""
        leases = self.reconciler.leases
        leases.force = True
        if self._driver.running:
            try:
                await leases.renew(self.clock.now())
            except HipqError as exc:
                log.warning("lease renewal failed: %s", exc, extra={"action": "lease_error"})
        self._driver.due()

    async def _start_notifier(self) -> None:
        if not self.settings.database.notify or self.store.dialect != "postgresql":
            return
        self.notifier = Notifier(self.settings.database.url, on_notify=self._notified,
                                 clock=self.clock)
        self.notifier.start()
        self._stack.push_async_callback(self._stop_notifier)
        await self.notifier.wait_connected(5.0)

    async def _stop_notifier(self) -> None:
        if self.notifier is not None:
            await self.notifier.stop()

    def _notified(self, payload: str) -> None:
        if payload == MEMBERS:
            self.reconciler.leases.force = True
            self._driver.due()
            return
        if payload == INTAKE:  # a producer committed rows to the intake (SPEC 16)
            self._intake_due = True
            self.wake()
            return
        if self._opened is not None:  # maybe responses written by another daemon
            self._opened.reconciler.inbox.arrived()
        self.wake()

    def _live_try(self, correlation_key: str) -> tuple[str, int] | None:
        """(token, attempt) of the try in this daemon's batch that holds the key."""
        entry = None if self._opened is None else (
            self._opened.reconciler.batch.by_key(correlation_key))
        return None if entry is None else (entry.token, entry.attempt)

    def _responses_arrived(self) -> None:
        if self._opened is not None:
            self._opened.reconciler.inbox.arrived()

    def _responses_written(self, rows: list[InboxRow]) -> None:
        """Responses this process wrote: applied at the next tick without a read."""
        if self._opened is not None:
            self._opened.reconciler.inbox.wrote(rows)

    def _work_arrived(self) -> None:
        """An enqueue or a response reached this daemon: its queue may be ours or
        another daemon's; wake both (the others only when there are: a daemon alone
        sends no NOTIFY; one that joins is seen at the next heartbeat)."""
        self.wake()
        if self.notifier is not None and self._others_live():
            self.notifier.notify(WAKE)

    def _others_live(self) -> bool:
        opened = self._opened
        return opened is None or len(opened.reconciler.leases.live) > 1

    def wake(self) -> None:
        """Run a tick soon (debounced); safe to call often and from callbacks.
        A no-op with ``reconcile.early_wake: false`` (ticks only at the interval)."""
        if self.settings.reconcile.early_wake:
            self._driver.wake()

    async def tick(self) -> None:
        """Ask for a tick now and wait until it ran (tests and embedders)."""
        await self._driver.tick_now()

    async def _tick(self) -> bool:
        """One reconcile pass, run by the driver; never raises. True when more is due
        at once: it launched a full batch, or tries ended within it (in-tick runs:
        the capacity they took is free again, and no answer will wake the next), or
        step 0 left new responses for the next tick (its bound per tick)."""
        try:
            return await self._reconcile()
        finally:
            self.ticked.set()

    async def _reconcile(self) -> bool:
        started = self.clock.monotonic()
        try:
            more = await self._ingest()
            result = await self.reconciler.run_once()
        except TransientStoreError as exc:
            log.warning("reconcile tick skipped: %s", exc, extra={"action": "tick_error"})
            return False
        except Exception:
            log.exception("reconcile tick failed", extra={"action": "tick_error"})
            return False
        if self.metrics.observe_tick(result, self.clock.monotonic() - started):
            log_failures(result.ended)
        if (tracer := tracing.tracer()).active:  # docs/traces.md: try spans end
            tracer.tries_ended(result.ended)
        held = frozenset(self.reconciler.held)
        if held - self._held_before:  # queues gained: their intake rows may wait
            self._intake_due = True
            self._driver.due()
        self._held_before = held
        if more:
            self._driver.due()
        if result.wake_at is not None:  # a partner's pause ends then
            try:
                self._driver.due_in(max((result.wake_at - self.clock.now()).total_seconds(),
                                        0.0))
            except Exception:  # never the driver's end: the periodic tick carries on
                log.exception("could not schedule a tick", extra={"action": "tick_error"})
        return (result.launched >= self.settings.reconcile.fetch_limit
                or result.ran_inline > 0 or result.archiving > 0
                or self.reconciler.inbox.backlog)  # new responses were left for it

    async def _ingest(self) -> bool:
        """The intake's rows of the owned queues become jobs (SPEC 16), when a
        notification, the SQLite watcher or the periodic tick said to look."""
        if not self._intake_due:
            return False
        self._intake_due = False
        try:
            owned = set(self.reconciler.held)
            known = [q.id for q in await self.store.queue_list()]
            more = await self.parts.intake.ingest(owned, known)
        except Exception:  # never the tick's: the rows wait for the next look
            log.exception("intake: ingest failed", extra={"action": "intake_error"})
            self._intake_due = True
            return False
        if more:  # (never reset here: a notification during the ingest stands)
            self._intake_due = True
        return more

    async def prune(self) -> None:
        before = self.clock.now() - timedelta(days=self.settings.archive.retention_days)
        try:
            pruned = PRUNE_BATCH
            while pruned == PRUNE_BATCH:  # small batches: no long transaction, no lock pile-up
                pruned = await self.store.archive_prune(before=before, limit=PRUNE_BATCH)
            pruned = PRUNE_BATCH
            while pruned == PRUNE_BATCH:  # rejected intake rows (docs/from-your-database.md)
                pruned = await self.store.intake_prune(before=before, now=self.clock.now(),
                                                       limit=PRUNE_BATCH)
        except HipqError as exc:
            log.warning("archive pruning failed: %s", exc, extra={"action": "prune_error"})

    def _stop_scheduler(self) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None

    async def _finish(self) -> None:
        """Stop fetching, let in-flight launches finish and be recorded (bounded by
        a grace period), run a last persist-only tick, release the leases. Running
        jobs stay running in the database for the next owner."""
        reconciler = self.reconciler
        reconciler.stop()
        await self._driver.stop()  # its tick in progress ends; no other starts
        self.parts.intake.close()
        try:
            try:
                await asyncio.wait_for(reconciler.drain(), SHUTDOWN_GRACE_SECONDS)
            except TimeoutError:
                log.warning("some launches were still in flight at shutdown")
            started = self.clock.monotonic()
            result = await reconciler.run_once()
            if self.metrics.observe_tick(result, self.clock.monotonic() - started):
                log_failures(result.ended)
            if (tracer := tracing.tracer()).active:
                tracer.tries_ended(result.ended)
            await reconciler.write_back_rates()
            await self.store.lease_release_all(owner=self.owner)
            await self.store.daemon_leave(owner=self.owner)
            if self.notifier is not None:  # the others take the queues over at once
                await self.notifier.send_now(MEMBERS)
        except HipqError as exc:
            log.warning("shutdown could not persist everything: %s", exc)

    async def shutdown(self) -> None:
        """Close everything :meth:`open` and :meth:`run` started, in reverse order."""
        log.info("shutting down", extra={"action": "stop"})
        await self._stack.aclose()


async def _cancelled(task: asyncio.Task[object]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@dataclass(frozen=True, slots=True)
class _Opened:
    store: Store
    service: Hipq
    reconciler: Reconciler
    intake: Intake
    http: HttpClient
    api: ApiServer | None
    kafka_consumer: KafkaResponseConsumer | None

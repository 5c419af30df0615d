"""The daemon: store + engine + APScheduler, with a graceful shutdown.

``Daemon.run(stop=event, ready=event)`` opens the store, migrates it, applies the
YAML queues (an upsert), and starts the parts: the API, the response consumer, and
the engine (:class:`~hipq.engine.facade.Engine`, whose one task runs the reconcile
ticks and decides when). APScheduler fires the periodic tick (every
``reconcile.interval_seconds``), the lease cadence, archive pruning and recurring
schedules; the daemon tells the engine what happened and nothing else. On ``stop``
the engine finishes its tick, in-flight launches finish and are recorded, a final
persist-only tick runs, the leases are released and the pool closed; running jobs
stay running in the database for the next owner.
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
from hipq.clock import Clock, SystemClock, delay
from hipq.config import Settings
from hipq.engine.facade import Engine
from hipq.engine.result import ReconcileResult
from hipq.errors import ConfigError, HipqError
from hipq.intake import Intake
from hipq.metrics import Metrics
from hipq.responses.signing import load_signer
from hipq.schedules import POLL_SECONDS as SCHEDULE_POLL_SECONDS
from hipq.schedules import Schedules, open_schedules
from hipq.service import Hipq
from hipq.store import Store, open_store
from hipq.store.notify import INTAKE, MEMBERS, Notifier
from hipq.targets import Target, Targets
from hipq.targets.http import HttpClient
from hipq.tick_log import log_failures

if TYPE_CHECKING:
    from hipq.responses.kafka_consumer import KafkaResponseConsumer

log = logging.getLogger(__name__)

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



class _QuietCancel(logging.Filter):
    """Drops a record whose exception is a cancellation (a job cut short at shutdown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info is not None
                    and isinstance(record.exc_info[1], asyncio.CancelledError))


QUIET_CANCEL = _QuietCancel()

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
        self._scheduler: AsyncIOScheduler | None = None
        self._opened: _Opened | None = None
        self.api_port: int | None = None  # the bound port once the API serves
        self.schedules: Schedules | None = None  # docs/configuration.md
        self.metrics = Metrics(monotonic=self.clock.monotonic)
        self.notifier: Notifier | None = None  # scale-out: LISTEN/NOTIFY (PostgreSQL)
        self._intake_due = True  # look at the intake at the next tick (docs/from-your-database.md)
        self._held_before: frozenset[str] = frozenset()

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
    def engine(self) -> Engine:
        return self.parts.engine

    @property
    def ticked(self) -> asyncio.Event:
        """Set once a tick ran (hipq run settles its heap then)."""
        return self.parts.engine.ticked

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
        signer = await load_signer(store, self.settings.signing_key)
        http = HttpClient(signer=signer, public_url=self.settings.api.public_url)
        self._stack.push_async_callback(http.close)
        producer = None
        if self.settings.kafka is not None:  # it connects lazily, retrying with back-off
            from hipq.targets.kafka_target import KafkaProducer  # aiokafka: 5 MB

            producer = KafkaProducer(self.settings.kafka, clock=self.clock)
            self._stack.push_async_callback(producer.close)
        engine = Engine(store, clock=self.clock, owner=self.owner,
                        config=self.settings.reconcile, responses=self.settings.responses,
                        targets=Targets(memory=self.memory_targets, http=http, kafka=producer),
                        before=self._ingest_for, after=self._observe,
                        partners={p.id: p.to_spec() for p in self.settings.partners})
        service = Hipq(store, clock=self.clock, engine=engine,
                       on_enqueued=self.metrics.enqueued_jobs,
                       partners=[p.id for p in self.settings.partners])
        for queue in self.settings.queues:
            await service.create_queue(queue)
        self.schedules = await open_schedules(service, self.settings, clock=self.clock)
        consumer = None
        if self.settings.kafka is not None:  # it connects lazily, retrying with back-off
            from hipq.responses.kafka_consumer import KafkaResponseConsumer

            consumer = KafkaResponseConsumer(self.settings.kafka, store, clock=self.clock,
                                             engine=engine, signer=signer)
        api = None
        if self.settings.api.enabled:
            api = ApiServer(ApiDeps(service=service, config=self.settings.api, signer=signer,
                                    schedules=self.schedules, metrics=self.metrics,
                                    declared_queues={q.id: q for q in self.settings.queues},
                                    trace_url=self.settings.dashboard.trace_url,
                                    partners={p.id: p.to_spec()
                                              for p in self.settings.partners}))
        return _Opened(store=store, service=service, engine=engine,
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
        parts.engine.start(peers=self.notifier)  # the first tick at once
        self._stack.push_async_callback(parts.engine.stop)
        if not self.store.supports_notify:  # producers of other processes say nothing
            self._spawn_first(self._watch_intake())
        self._start_scheduler()
        self._stack.callback(self._stop_scheduler)
        if parts.kafka_consumer is not None:
            parts.kafka_consumer.start()
            self._stack.push_async_callback(parts.kafka_consumer.stop)

    def _start_scheduler(self) -> None:
        # a job's task the shutdown cancels is no error (APScheduler logs it as one)
        logging.getLogger("apscheduler.executors.default").addFilter(QUIET_CANCEL)
        scheduler = AsyncIOScheduler(timezone=UTC)
        scheduler.add_job(self._periodic_tick, "interval", id="reconcile",
                          seconds=self.settings.reconcile.interval_seconds,
                          max_instances=1, coalesce=True, misfire_grace_time=None)
        # leases on their own cadence, whatever interval_seconds is (scale-out)
        scheduler.add_job(self.engine.leases_due, "interval", id="leases",
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
        """APScheduler's reconcile job: the engine ticks now; the tick also looks at
        the intake (polling, whatever the notifications said)."""
        self._intake_due = True
        self.engine.interval()

    async def _watch_intake(self) -> None:
        """SQLite: a producer in another process writes the intake without a
        notification; its largest row id (one index probe) is looked at every
        :data:`INTAKE_WATCH_SECONDS`, and a new row wakes the tick."""
        seen = 0
        while True:
            await delay(self.clock, INTAKE_WATCH_SECONDS)  # real-time polling
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

    # -- scale-out: wake-ups across daemons ------------------------------------------------

    async def _start_notifier(self) -> None:
        if not self.settings.database.notify or not self.store.supports_notify:
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
        if self._opened is None:
            return
        engine = self._opened.engine
        if payload == MEMBERS:
            engine.members_changed()
            return
        if payload == INTAKE:  # a producer committed rows to the intake
            self._intake_due = True
            engine.wake()
            return
        engine.responses_arrived()  # maybe responses written by another daemon
        engine.wake()

    def wake(self) -> None:
        """Run a tick soon (debounced); safe to call often and from callbacks.
        A no-op with ``reconcile.early_wake: false`` (ticks only at the interval)."""
        if self._opened is not None:
            self._opened.engine.wake()

    async def tick(self) -> None:
        """Ask for a tick now and wait until it ran (tests and embedders)."""
        await self.engine.tick()

    def _observe(self, result: ReconcileResult, seconds: float) -> None:
        """After each tick: its metrics, the failed tries' log lines, their spans."""
        if self.metrics.observe_tick(result, seconds):
            log_failures(result.ended)
        if (tracer := tracing.tracer()).active:  # docs/traces.md: try spans end
            tracer.tries_ended(result.ended)

    async def _ingest_for(self, held: frozenset[str]) -> bool:
        """Before each tick: the intake, when asked for or when queues were gained
        (their rows may wait); whether more rows wait."""
        if held - self._held_before:
            self._intake_due = True
        self._held_before = held
        return await self._ingest()

    async def _ingest(self) -> bool:
        """The intake's rows of the owned queues become jobs
        (docs/from-your-database.md), when a
        notification, the SQLite watcher or the periodic tick said to look."""
        if not self._intake_due:
            return False
        self._intake_due = False
        try:
            owned = set(self.engine.held)
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
        engine = self.engine
        await engine.stop()  # its tick in progress ends; no other starts
        self.parts.intake.close()
        await engine.close()
        if self.notifier is not None:  # the others take the queues over at once
            try:
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
    engine: Engine
    intake: Intake
    http: HttpClient
    api: ApiServer | None
    kafka_consumer: KafkaResponseConsumer | None

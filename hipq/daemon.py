"""The daemon: store + reconciler + APScheduler, with a graceful shutdown.

``Daemon.run(stop=event, ready=event)`` opens the store, migrates it, applies the
YAML queues (an upsert), and runs the reconcile tick as an APScheduler interval
job, woken early (debounced) by work arriving in this process. On ``stop`` it
stops fetching, lets in-flight launches finish and be recorded, runs a final
persist-only tick, releases its leases and closes the pool; running jobs stay
running in the database for the next owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from hipq.api import ApiDeps, ApiServer
from hipq.clock import Clock, SystemClock
from hipq.config import Settings
from hipq.errors import ConfigError, HipqError, TransientStoreError
from hipq.metrics import Metrics
from hipq.reconciler import Reconciler
from hipq.responses.kafka import KafkaResponseConsumer
from hipq.responses.signing import load_signer
from hipq.service import Hipq
from hipq.store import SQLStore, open_store
from hipq.targets import Target
from hipq.targets.http import HttpClient
from hipq.targets.kafka import KafkaProducer
from hipq.tick_log import log_failures

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 10.0
PRUNE_INTERVAL_SECONDS = 3600.0
PRUNE_BATCH = 1000


GC_YOUNG_THRESHOLD = 50_000  # allocations between young-generation collections


def settle_heap() -> None:
    """Once the daemon runs: what startup allocated (modules, settings, the pool)
    lives as long as the process, so it leaves the cyclic collector's scans
    (``gc.freeze``), and young collections run every 50,000 allocations instead of
    700. A tick allocates a few objects per job of its batch; with the default
    thresholds the collector ran every few hundred jobs and its older-generation
    passes walked every live job. Memory held by cyclic garbage stays bounded by
    the (larger) threshold. Called by ``hipq run``, not by embedders."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def make_owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Daemon:
    def __init__(self, settings: Settings, *, clock: Clock | None = None,
                 memory_targets: Mapping[str, Target] | None = None,
                 migrate: bool = True) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.memory_targets = memory_targets
        self.migrate = migrate
        self.owner = make_owner_id()
        self.store: SQLStore | None = None
        self.service: Hipq | None = None
        self.reconciler: Reconciler | None = None
        self._scheduler: AsyncIOScheduler | None = None
        self._tick_lock = asyncio.Lock()
        self._again = False
        self._wake_handle: asyncio.TimerHandle | None = None
        self.http: HttpClient | None = None
        self.kafka_producer: KafkaProducer | None = None
        self.kafka_consumer: KafkaResponseConsumer | None = None
        self.api: ApiServer | None = None
        self.api_port: int | None = None  # the bound port once the API serves
        self.metrics = Metrics(monotonic=self.clock.monotonic)

    async def open(self) -> Hipq:
        """Open and migrate the store, apply the YAML queues; return the service."""
        self.store = await open_store(self.settings.database.url,
                                      pool_size=self.settings.database.pool_size)
        try:
            if self.migrate:
                await self.store.migrate()
            else:
                await self.store.check_schema()
            self.service = Hipq(self.store, clock=self.clock, on_work=self.wake,
                                on_enqueued=self.metrics.enqueued_jobs)
            for queue in self.settings.queues:
                await self.service.create_queue(queue)
            signer = await load_signer(self.store, self.settings.signing_key)
        except BaseException:
            await self.store.close()
            raise
        self.http = HttpClient(signer=signer, public_url=self.settings.api.public_url)
        if self.settings.api.enabled:
            self.api = ApiServer(ApiDeps(service=self.service, config=self.settings.api,
                                         signer=signer, metrics=self.metrics))
        self.reconciler = Reconciler(self.store, clock=self.clock, owner=self.owner,
                                     config=self.settings.reconcile,
                                     responses=self.settings.responses,
                                     memory_targets=self.memory_targets, on_wake=self.wake,
                                     http_client=self.http,
                                     kafka_producer=self._open_kafka())
        return self.service

    def _open_kafka(self) -> KafkaProducer | None:
        """The shared producer and the response consumer; both connect lazily and
        retry with back-off, so a broker that is down never stops the daemon."""
        kafka = self.settings.kafka
        if kafka is None or self.store is None:
            return None
        self.kafka_producer = KafkaProducer(kafka, clock=self.clock)
        self.kafka_consumer = KafkaResponseConsumer(kafka, self.store, clock=self.clock,
                                                    on_work=self.wake)
        return self.kafka_producer

    async def run(self, *, stop: asyncio.Event, ready: asyncio.Event | None = None) -> None:
        if self.service is None:
            await self.open()
        await self._start_http()
        self._start_scheduler()
        if self.kafka_consumer is not None:
            self.kafka_consumer.start()
        log.info("hipq running as %s (database %s)", self.owner,
                 self.settings.database.url.split("@")[-1], extra={"action": "start"})
        if ready is not None:
            ready.set()
        try:
            await stop.wait()
        finally:
            await self.shutdown()

    async def _start_http(self) -> None:
        """The shared HTTP client session, then the API (callback URLs need its port)."""
        assert self.http is not None
        await self.http.start()
        if self.api is not None:
            try:
                self.api_port = await self.api.start()
            except OSError as exc:
                await self.http.close()
                if self.store is not None:
                    await self.store.close()
                raise ConfigError(f"api: cannot listen on {self.settings.api.host}:"
                                  f"{self.settings.api.port}: {exc.strerror}") from None
            if self.http.public_url is None:
                self.http.public_url = self.api.url

    def _start_scheduler(self) -> None:
        scheduler = AsyncIOScheduler(timezone=UTC)
        scheduler.add_job(self._scheduled_tick, "interval", id="reconcile",
                          seconds=self.settings.reconcile.interval_seconds,
                          next_run_time=datetime.now(UTC), max_instances=3, coalesce=True,
                          misfire_grace_time=None)
        scheduler.add_job(self.prune, "interval", id="prune", seconds=PRUNE_INTERVAL_SECONDS,
                          max_instances=1, coalesce=True)
        scheduler.start()
        self._scheduler = scheduler

    async def _scheduled_tick(self) -> None:
        """The APScheduler job. The scheduler's shutdown cancels the jobs it is running,
        and a tick cut short can leave jobs marked running that were never launched
        (their next owner fails them as ``lost``): the tick is shielded, and
        :meth:`shutdown` waits for it on the tick lock."""
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self.tick())

    def wake(self) -> None:
        """Run a tick soon (debounced); safe to call often and from callbacks.
        A no-op with ``reconcile.early_wake: false`` (ticks only at the interval)."""
        if not self.settings.reconcile.early_wake:
            return
        if self._tick_lock.locked():
            self._again = True
            return
        if self._wake_handle is not None or self._scheduler is None:
            return
        loop = asyncio.get_running_loop()
        self._wake_handle = loop.call_later(self.settings.reconcile.debounce_seconds,
                                            self._wake_now)

    def _wake_now(self) -> None:
        self._wake_handle = None
        task = asyncio.ensure_future(self.tick())
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def tick(self) -> None:
        """One reconcile pass (repeated while work keeps arriving); never raises."""
        if self._tick_lock.locked():
            self._again = True
            return
        assert self.reconciler is not None
        async with self._tick_lock:
            self._again = True
            while self._again:
                self._again = False
                started = self.clock.monotonic()
                try:
                    result = await self.reconciler.run_once()
                except TransientStoreError as exc:
                    log.warning("reconcile tick skipped: %s", exc, extra={"action": "tick_error"})
                    return
                except Exception:
                    log.exception("reconcile tick failed", extra={"action": "tick_error"})
                    return
                if self.metrics.observe_tick(result, self.clock.monotonic() - started):
                    log_failures(result.ended)
                if self._again:
                    # After a full batch more is due at once: only let the launches
                    # run (one pass of the event loop); else gather the wake-ups.
                    full = result.launched >= self.settings.reconcile.fetch_limit
                    pause = 0.0 if full else self.settings.reconcile.debounce_seconds
                    await asyncio.sleep(pause)  # noqa: TID251

    async def prune(self) -> None:
        assert self.store is not None
        before = self.clock.now() - timedelta(days=self.settings.archive.retention_days)
        try:
            pruned = PRUNE_BATCH
            while pruned == PRUNE_BATCH:  # small batches: no long transaction, no lock pile-up
                pruned = await self.store.archive_prune(before=before, limit=PRUNE_BATCH)
        except HipqError as exc:
            log.warning("archive pruning failed: %s", exc, extra={"action": "prune_error"})

    async def shutdown(self) -> None:
        log.info("shutting down", extra={"action": "stop"})
        if self.api is not None:
            await self.api.stop()
        if self._wake_handle is not None:
            self._wake_handle.cancel()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        if self.kafka_consumer is not None:
            await self.kafka_consumer.stop()
        try:
            if self.reconciler is not None:
                self.reconciler.stop()
                async with self._tick_lock:
                    try:
                        await asyncio.wait_for(self.reconciler.drain(), SHUTDOWN_GRACE_SECONDS)
                    except TimeoutError:
                        log.warning("some launches were still in flight at shutdown")
                    started = self.clock.monotonic()
                    result = await self.reconciler.run_once()
                    if self.metrics.observe_tick(result, self.clock.monotonic() - started):
                        log_failures(result.ended)
            if self.store is not None:
                await self.store.lease_release_all(owner=self.owner)
        except HipqError as exc:
            log.warning("shutdown could not persist everything: %s", exc)
        finally:
            await self._close_clients()

    async def _close_clients(self) -> None:
        if self.kafka_producer is not None:
            await self.kafka_producer.close()
        if self.http is not None:
            await self.http.close()
        if self.store is not None:
            await self.store.close()

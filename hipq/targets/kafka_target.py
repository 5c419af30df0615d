"""The Kafka target: ``{kind: kafka, topic, key: "<template>"}``, and the shared producer.

Each launch produces one message to ``topic``: the JSON value ``{"id", "queue",
"data", "attempt", "max_attempts", "correlation_key", "callback_url"}`` (as the
HTTP target posts), the correlation key as the header ``Hipq-Correlation-Key``
(plus ``Hipq-Queue``, ``Hipq-Job-Id``, ``Hipq-Attempt``, the try's
``Hipq-Signature`` that its response carries back (docs/kafka.md, "Signed
responses"), and for a job with a trace the try's ``traceparent`` and
``tracestate``: docs/traces.md), and as message key
the correlation key, or the ``key`` template rendered over ``id``, ``queue``,
``data``, ``attempt`` and ``correlation_key`` (e.g. ``"{data.customer}"`` keeps
one customer's requests in order on one partition).

State model of :class:`KafkaProducer` (one per daemon, shared by every Kafka
target): *stopped* -> (first send) *starting* -> *running*; a start that fails
(broker down) leaves it *stopped* with a back-off deadline (doubling from
``reconnect_backoff_seconds`` to ``reconnect_backoff_max_seconds``), and sends
before that deadline fail at once, so a dead broker costs no waiting. A running
producer reconnects by itself (aiokafka); one that reports a non-retriable error
is closed and started again lazily. The daemon never waits for Kafka to start.

Idempotence: ``kafka.idempotence`` ``true`` / ``false`` / ``auto`` (default).
``auto`` starts an idempotent producer and, when the broker connects but refuses
``InitProducerId`` (old brokers, Tansu), falls back to a plain ``acks=all``
producer for the life of the process, logging a warning once.

Failure modes, as the launch's outcome (a failed try, retried by the queue's
strategy; never dropped): the producer cannot start, or the message cannot be
handed over (no metadata, too large): ``transport``; handed over but not
acknowledged within ``delivery_timeout_seconds``: ``timeout``, because the
broker may still have written it (an ``at_most_once`` queue does not retry it);
a ``key`` template that does not fit the job's data fails the job (not retryable).

Pipelining: :meth:`KafkaTarget.dispatch` hands the message to the producer and
returns without waiting for the broker; the launcher records the launch's
confirmation (or failure) when the acknowledgement arrives. At most
``kafka.max_in_flight`` messages are unacknowledged at a time (a dispatch waits for
a slot), and the producer gathers them into batches of up to ``kafka.batch_size``
bytes per partition, so throughput no longer depends on ``launch_concurrency``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from hipq import json_text, tracing
from hipq.clock import Clock, SystemClock
from hipq.config import KafkaConfig
from hipq.config import KafkaTarget as KafkaTargetConfig
from hipq.errors import LaunchError, TransientLaunchError
from hipq.jobs import ErrorKind, Job
from hipq.responses.correlation import TemplateError, render
from hipq.targets.http import HttpClient
from hipq.targets.interface import ACCEPTED, LaunchOutcome

log = logging.getLogger(__name__)

CORRELATION_HEADER = "Hipq-Correlation-Key"
QUEUE_HEADER = "Hipq-Queue"
JOB_ID_HEADER = "Hipq-Job-Id"
ATTEMPT_HEADER = "Hipq-Attempt"
SIGNATURE_HEADER = "Hipq-Signature"  # Signer.response_signature of the try
ACK_GRACE_SECONDS = 2.0  # beyond the producer's own delivery timeout

Headers = Sequence[tuple[str, bytes]]
_ENCODE = json_text.encoder(separators=(",", ":"), default=str)


class Slots:
    """A first-come-first-served semaphore whose release hands the slot straight to
    the first waiter. ``asyncio.Semaphore`` keeps a woken waiter in its queue until it
    runs, and each release (and each ``acquire`` while none is free) walks past those:
    acknowledgements come by the hundred at once while a thousand dispatches wait,
    which made the walks quadratic (issue 28)."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, n: int) -> None:
        self._free = n
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def free(self) -> int:
        """Slots nobody holds."""
        return self._free

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # resolved by release(): the slot is ours
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed over, then cancelled
                self.release()
            raise  # (a cancelled waiter left in the queue is skipped by release)

    def release(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


class KafkaProducer:
    """One lazily started ``AIOKafkaProducer`` (``acks=all``) shared by a daemon."""

    def __init__(self, config: KafkaConfig, *, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.idempotent: bool | None = None  # known once a producer has started
        self.failed_starts = 0
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()
        self._slots = Slots(config.max_in_flight)
        self._retry_at = 0.0
        self._last_error = ""
        self._refused_idempotence = False
        self._closed = False
        # the dispatched messages in order, with the loop time by which each must have
        # been acknowledged: one timer for them all, armed for the first that waits
        self._guards: deque[tuple[float, asyncio.Future[None], str]] = deque()
        self._guard_timer: asyncio.TimerHandle | None = None

    @property
    def running(self) -> bool:
        return self._producer is not None

    async def send(self, topic: str, *, key: bytes | None, value: bytes,
                   headers: Headers = ()) -> None:
        """Produce one message and wait for its acknowledgement.

        Raises :class:`TransientLaunchError` (kind ``transport`` or ``timeout``)."""
        await (await self.dispatch(topic, key=key, value=value, headers=headers))

    async def dispatch(self, topic: str, *, key: bytes | None, value: bytes,
                       headers: Headers = ()) -> asyncio.Future[None]:
        """Hand one message to the producer (waiting for an in-flight slot, not for
        the broker); the returned future resolves on its acknowledgement, or fails
        with :class:`TransientLaunchError` (``timeout`` when no acknowledgement came
        within ``delivery_timeout_seconds``). Raises :class:`TransientLaunchError`
        (``transport``) when the message cannot be handed over."""
        producer = await self._get()
        await self._slots.acquire()
        try:
            ack = await producer.send(topic, value=value, key=key, headers=list(headers))
        except KafkaError as exc:
            self._slots.release()
            self._note_error(exc)
            raise TransientLaunchError(f"Kafka produce to {topic!r} failed: {_text(exc)}",
                                       kind=ErrorKind.TRANSPORT) from None
        except BaseException:
            self._slots.release()
            raise
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._guard(loop, done, topic)
        ack.add_done_callback(functools.partial(self._acked, topic, done))
        return done

    def _guard(self, loop: asyncio.AbstractEventLoop, done: asyncio.Future[None],
               topic: str) -> None:
        """Fail ``done`` as a ``timeout`` if no acknowledgement came within the
        producer's delivery timeout and a grace (one timer for every message, not one
        each: the deadlines come in dispatch order)."""
        guards = self._guards
        while guards and guards[0][1].done():  # acknowledged: forget them
            guards.popleft()
        if len(guards) > 2 * self.config.max_in_flight:  # behind one that still waits
            self._guards = guards = deque(g for g in guards if not g[1].done())
        deadline = loop.time() + self.config.delivery_timeout_seconds + ACK_GRACE_SECONDS
        guards.append((deadline, done, topic))
        if self._guard_timer is None:
            self._guard_timer = loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        """The guard timer: fail what waited too long; arm it for the next one."""
        self._guard_timer = None
        loop = asyncio.get_running_loop()
        now, guards = loop.time(), self._guards
        while guards:
            deadline, done, topic = guards[0]
            if not done.done():
                if deadline > now:
                    self._guard_timer = loop.call_at(deadline, self._expire)
                    return
                self._slots.release()
                done.set_exception(TransientLaunchError(
                    f"Kafka did not acknowledge the message to {topic!r} within "
                    f"{self.config.delivery_timeout_seconds:g}s", kind=ErrorKind.TIMEOUT))
            guards.popleft()

    def _acked(self, topic: str, done: asyncio.Future[None], ack: asyncio.Future[Any]) -> None:
        if done.done():  # already failed by the guard (its slot released there)
            return
        self._slots.release()
        exc = None if ack.cancelled() else ack.exception()
        if ack.cancelled() or isinstance(exc, KafkaTimeoutError):
            done.set_exception(TransientLaunchError(
                f"Kafka did not acknowledge the message to {topic!r} within "
                f"{self.config.delivery_timeout_seconds:g}s", kind=ErrorKind.TIMEOUT))
        elif exc is not None:
            if isinstance(exc, KafkaError):
                self._note_error(exc)
            done.set_exception(TransientLaunchError(
                f"Kafka produce to {topic!r} failed: {_text(exc)}", kind=ErrorKind.TRANSPORT))
        else:
            done.set_result(None)

    async def close(self) -> None:
        self._closed = True
        if self._guard_timer is not None:
            self._guard_timer.cancel()
            self._guard_timer = None
        async with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            await _stop_quietly(producer)

    # -- lifecycle -------------------------------------------------------------------

    async def _get(self) -> AIOKafkaProducer:
        producer = self._producer
        if producer is not None:
            return producer
        async with self._lock:
            if self._producer is not None:
                return self._producer
            if self._closed:
                raise TransientLaunchError("the Kafka producer is closed",
                                           kind=ErrorKind.TRANSPORT)
            wait = self._retry_at - self.clock.monotonic()
            if wait > 0:
                raise TransientLaunchError(
                    f"Kafka is unavailable ({self._last_error}); next connection attempt "
                    f"in {wait:.1f}s", kind=ErrorKind.TRANSPORT)
            try:
                self._producer = await self._start()
            except (KafkaError, OSError) as exc:
                self._start_failed(exc)
                raise TransientLaunchError(f"Kafka is unavailable: {self._last_error}",
                                           kind=ErrorKind.TRANSPORT) from None
            self.failed_starts = 0
            self._retry_at = 0.0
            return self._producer

    async def _start(self) -> AIOKafkaProducer:
        wanted = self.config.idempotence
        if wanted is False or (wanted == "auto" and self._refused_idempotence):
            return await self._start_one(idempotent=False)
        try:
            return await self._start_one(idempotent=True)
        except KafkaConnectionError:
            raise
        except KafkaError as exc:
            if wanted is True:
                raise
            self._refused_idempotence = True
            log.warning("the Kafka broker refused the idempotent producer (%s); using a "
                        "plain acks=all producer", _text(exc),
                        extra={"action": "kafka_idempotence_off"})
            return await self._start_one(idempotent=False)

    async def _start_one(self, *, idempotent: bool) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.config.bootstrap_servers, client_id=self.config.client_id,
            acks="all", enable_idempotence=idempotent, linger_ms=self.config.linger_ms,
            max_batch_size=self.config.batch_size,
            request_timeout_ms=int(self.config.delivery_timeout_seconds * 1000),
            **self.config.client_options)
        try:
            await producer.start()
        except BaseException:
            await _stop_quietly(producer)
            raise
        self.idempotent = idempotent
        log.info("Kafka producer connected to %s (idempotent: %s)",
                 self.config.bootstrap_servers, idempotent,
                 extra={"action": "kafka_producer_start"})
        return producer

    def _start_failed(self, exc: BaseException) -> None:
        self.failed_starts += 1
        self._last_error = _text(exc)
        delay = min(self.config.reconnect_backoff_seconds * 2 ** (self.failed_starts - 1),
                    self.config.reconnect_backoff_max_seconds)
        self._retry_at = self.clock.monotonic() + delay
        log.warning("Kafka producer cannot start (%s); retrying in %.1fs", self._last_error,
                    delay, extra={"action": "kafka_producer_down"})

    def _note_error(self, exc: KafkaError) -> None:
        """A non-retriable producer error: start a fresh producer for the next sends."""
        if getattr(exc, "retriable", False) or isinstance(exc, KafkaConnectionError):
            return
        producer, self._producer = self._producer, None
        if producer is not None:
            log.warning("restarting the Kafka producer after %s", _text(exc),
                        extra={"action": "kafka_producer_restart"})
            task = asyncio.create_task(_stop_quietly(producer))
            task.add_done_callback(lambda t: None)


async def _stop_quietly(producer: AIOKafkaProducer) -> None:
    try:
        await producer.stop()
    except Exception as exc:  # closing a broken client must not hide the first error
        log.debug("error while stopping a Kafka producer: %r", exc)


def _text(exc: BaseException) -> str:
    return (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)[:500]


class KafkaTarget:
    def __init__(self, config: KafkaTargetConfig, producer: KafkaProducer | None,
                 http: HttpClient | None = None) -> None:
        self.config = config
        self.producer = producer
        self.http = http

    def message_key(self, job: Job, correlation_key: str) -> str:
        if self.config.key is None:
            return correlation_key
        scope = {"id": job.id, "queue": job.queue, "data": job.data, "attempt": job.attempt,
                 "correlation_key": correlation_key}
        return render(self.config.key, scope)

    def body_for(self, job: Job, key: str) -> dict[str, Any]:
        callback = self.http.callback_url(key, job) if self.http is not None else None
        return {"id": job.id, "queue": job.queue, "data": job.data, "attempt": job.attempt,
                "max_attempts": job.max_attempts, "correlation_key": key,
                "callback_url": callback}

    async def launch(self, job: Job) -> LaunchOutcome:
        await (await self.dispatch(job))
        return ACCEPTED

    async def dispatch(self, job: Job) -> asyncio.Future[None]:
        """Hand the launch to the producer; the future resolves when the broker
        acknowledges it (see :meth:`KafkaProducer.dispatch`)."""
        if self.producer is None:
            raise TransientLaunchError("no Kafka producer: Kafka targets need the "
                                       "'kafka' settings and run inside a daemon")
        key = job.correlation_key or ""
        try:
            message_key = self.message_key(job, key)
        except TemplateError as exc:
            raise LaunchError(f"Kafka message key: {exc}", kind="key_template") from None
        value = _ENCODE(self.body_for(job, key)).encode()
        headers = [(CORRELATION_HEADER, key.encode()), (QUEUE_HEADER, job.queue.encode()),
                   (JOB_ID_HEADER, job.id.encode()), (ATTEMPT_HEADER, str(job.attempt).encode())]
        signer = None if self.http is None else self.http.signer
        if signer is not None:
            headers.append((SIGNATURE_HEADER, signer.response_signature(
                key, job.attempt, job.token).encode()))
        if job.trace is not None:  # the try's traceparent (and tracestate), docs/traces.md
            headers.extend((name, value.encode()) for name, value in tracing.try_headers())
        return await self.producer.dispatch(self.config.topic, key=message_key.encode(),
                                            value=value, headers=headers)

    async def close(self) -> None:
        return None  # the producer is the daemon's

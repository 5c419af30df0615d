"""The Kafka response consumer: ``kafka.response_topics`` -> the response inbox.

One aiokafka consumer group (``kafka.group_id``) per daemon, with manual commits.
Each polled batch is handled in this order, which is the whole crash-safety story:

1. parse every message into a :class:`~hipq.store.Response` (or count it malformed);
2. write them all to the inbox in one transaction, each with the dedup key
   ``kafka:<topic>:<partition>:<offset>:<timestamp>``;
3. only then commit the offsets past the batch. The commit runs while the next
   batch is polled and written (at most one commit in flight, in order: the next
   commit starts after the previous one ended), so a slow commit does not hold
   up the next poll.

The steps are pipelined (issue 28): while a batch is written (2), the next one is
polled and parsed (1), and written once the first one's write has ended, so the
inserts, and the commits after them, stay one at a time and in order.

A crash between 2 and 3 re-delivers the batch to the next consumer of the group;
the inbox ignores rows whose dedup key it already holds, so nothing is applied
twice and nothing is lost. The message timestamp is part of the key because a
broker that loses its data (a test broker restart, a re-created topic) numbers
offsets from 0 again: a new message at an old offset must not pass for a repeat.
If the insert fails (database down) nothing is committed: the consumer seeks back
and retries after a back-off.

The correlation key of a message, first found wins:

* the header ``Hipq-Correlation-Key``;
* the queues' ``correlation.response`` templates (or plugins), over ``key``
  (text), ``value`` (the JSON value) and ``headers`` (text values); only the
  queue named by a ``Hipq-Queue`` header if there is one, else every queue that
  has one, in id order;
* the message key.

The templates are read from the store at most every ``TEMPLATE_REFRESH_SECONDS``;
a batch holding a message that none matched (and that has no key) reads them
again at once and parses such messages again, so a response to a queue created
or changed a moment ago (here or on another daemon) is not lost.

The response fields are read from the JSON value at ``kafka.response_fields``
(dotted paths; defaults ``status``, ``retryable``, ``result``, ``error``,
``attempt``, ``extend_seconds``; a missing ``attempt`` falls back to the
``Hipq-Attempt`` header). A message whose value is not a JSON object, whose
fields are invalid, or that yields no key is *malformed*: counted, logged once
with its topic/partition/offset, and skipped (its offset is committed). The
parser refuses whatever a store could not hold (``hipq.values``: NUL characters,
non-finite numbers, integers out of range, deep nesting; an ``attempt`` above
2^31-1; a key over 500 characters), so a poison message never reaches the insert.
Should an insert still fail for a reason other than the database being down,
the batch is written message by message and the ones that fail are skipped the
same way: one bad message never stalls the partition.

With ``kafka.require_signed_responses`` (docs/kafka.md, "Signed responses"), a
response without its launch's ``Hipq-Signature`` for its key (or with another
``attempt``) is *forged*: counted, logged (never the header) and skipped; a signed
one goes to the inbox with the signed attempt and token, so it applies to that try
of that job only (as a signed callback URL's). Without it the header is not read.

Connection loss: the consumer reconnects with a doubling back-off
(``reconnect_backoff_seconds`` .. ``reconnect_backoff_max_seconds``); the daemon
keeps running meanwhile. Test hook: a consumer built with ``pause_file`` (a
path) writes that file after its first inbox insert and then waits forever
without committing, so a test can SIGKILL it right there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import ValidationError as PydanticValidationError

from hipq.bodies import ResponseRequest
from hipq.clock import Clock, SystemClock
from hipq.config import CorrelationConfig, KafkaConfig, KafkaResponseFields
from hipq.errors import HipqError, TransientStoreError
from hipq.paths import MISSING, lookup
from hipq.responses.correlation import TemplateError, response_key
from hipq.responses.signing import Signer
from hipq.store import InboxRow, Response, Store
from hipq.store.records import written_rows
from hipq.values import INT32_MAX, json_problem, text_problem

if TYPE_CHECKING:
    from hipq.engine.facade import EngineLink

log = logging.getLogger(__name__)

CORRELATION_HEADER = "Hipq-Correlation-Key"
QUEUE_HEADER = "Hipq-Queue"
ATTEMPT_HEADER = "Hipq-Attempt"
SIGNATURE_HEADER = "Hipq-Signature"
MAX_KEY_CHARS = 500  # a correlation key longer than this is malformed
POLL_TIMEOUT_MS = 500
BUSY_SECONDS = 2.0  # the short fetch wait holds this long after the last message
TEMPLATE_REFRESH_SECONDS = 5.0
STOP_GRACE_SECONDS = 10.0


Batches = Mapping[TopicPartition, Sequence[Any]]  # a poll's records by partition


class MalformedMessage(ValueError):
    """A response message that cannot be turned into a response."""


class ForgedResponse(MalformedMessage):
    """With ``require_signed_responses``: no valid signature for its key and attempt."""


class NoCorrelationKey(MalformedMessage):
    """No header, no template of the queues as last read, no message key: maybe a
    template read since would match."""


class KafkaCommitStuck(KafkaError):  # type: ignore[misc]  # aiokafka is untyped
    """An offset commit that did not finish: reconnect."""


@dataclass(slots=True)
class ConsumerStats:
    consumed: int = 0
    inserted: int = 0
    duplicates: int = 0  # already in the inbox (re-delivered after a crash or rebalance)
    malformed: int = 0  # skipped: not a response hipq can store
    forged: int = 0  # skipped: no valid signature, with require_signed_responses
    commits: int = 0
    commit_failures: int = 0
    connects: int = 0
    errors: int = 0


class ResponseParser:
    """Turns one consumer record into a :class:`Response` (pure: no I/O). With a
    ``signer``, only a response signed for its key's try (see the module doc)."""

    def __init__(self, fields: KafkaResponseFields,
                 correlations: Mapping[str, CorrelationConfig] | None = None, *,
                 signer: Signer | None = None) -> None:
        self.fields = fields
        self.correlations = dict(sorted((correlations or {}).items()))
        self.signer = signer

    def parse(self, record: Any) -> Response:
        headers = _headers(record.headers)
        value = _json_object(record.value)
        key = None if record.key is None else bytes(record.key).decode("utf-8", "replace")
        correlation_key = _storable_key(self._correlation_key(key, value, headers))
        response = _fast_fields(value, headers, self.fields) or self._fields(value, headers)
        attempt, token = response.attempt, None
        if self.signer is not None:
            attempt, token = self._signed_try(correlation_key, attempt, headers)
        return Response(correlation_key=correlation_key, attempt=attempt,
                        status=response.status, retryable=response.retryable,
                        result=response.result, error=response.error,
                        extend_seconds=response.seconds, source="kafka",
                        dedup_key=dedup_key(record), token=token)

    def _signed_try(self, correlation_key: str, attempt: int | None,
                    headers: Mapping[str, str]) -> tuple[int, str]:
        """(attempt, token) that the message's signature was issued for."""
        assert self.signer is not None
        signed = self.signer.signed_try(correlation_key, headers.get(SIGNATURE_HEADER, ""))
        if signed is None:
            raise ForgedResponse(f"no valid {SIGNATURE_HEADER} header for its correlation "
                                 "key (kafka.require_signed_responses)")
        if attempt is not None and attempt != signed[0]:
            raise ForgedResponse(f"its attempt {attempt} is not the one its "
                                 f"{SIGNATURE_HEADER} was issued for")
        return signed

    def _correlation_key(self, key: str | None, value: dict[str, Any],
                         headers: dict[str, str]) -> str:
        if headers.get(CORRELATION_HEADER):
            return headers[CORRELATION_HEADER]
        problems: list[str] = []
        queue = headers.get(QUEUE_HEADER)
        candidates = ([(queue, self.correlations[queue])] if queue in self.correlations
                      else list(self.correlations.items()))
        scope = {"key": key, "value": value, "headers": headers}
        for queue_id, config in candidates:
            try:
                return response_key(config, scope)
            except (TemplateError, HipqError) as exc:
                problems.append(f"{queue_id}: {exc}")
        if key:
            return key
        detail = "; ".join(problems) if problems else "no response template matched"
        raise NoCorrelationKey(f"no correlation key (no {CORRELATION_HEADER} header, no "
                               f"message key; {detail})")

    def _fields(self, value: Mapping[str, Any], headers: Mapping[str, str]) -> ResponseRequest:
        f = self.fields
        raw = {"status": _get(value, f.status), "retryable": _get(value, f.retryable),
               "result": _get(value, f.result), "error": _get(value, f.error),
               "attempt": _get(value, f.attempt),
               "extend_seconds": _get(value, f.extend_seconds),
               "retry_after_seconds": _get(value, f.retry_after_seconds)}
        if raw["attempt"] is None and headers.get(ATTEMPT_HEADER):
            raw["attempt"] = headers[ATTEMPT_HEADER]
        if raw["status"] is None:
            raw["status"] = "succeeded"
        try:
            return ResponseRequest.model_validate(raw)
        except PydanticValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                                 for e in exc.errors(include_url=False))
            raise MalformedMessage(f"invalid response fields: {problems}") from None


# -- the usual response shape without pydantic (issue 12) ---------------------------------

_DEFAULT_FIELDS = KafkaResponseFields()
_FINAL = frozenset({"succeeded", "failed"})


class _Fields(NamedTuple):
    status: str
    attempt: int | None
    retryable: bool | None
    result: Any
    error: Any
    extend_seconds: float | None

    @property
    def seconds(self) -> float | None:
        return self.extend_seconds


def _fast_fields(value: Mapping[str, Any], headers: Mapping[str, str],
                 fields: KafkaResponseFields) -> _Fields | None:
    """The fields of a response with the default field paths and a plain shape (a
    final ``status`` or none, an int ``attempt`` >= 1 or none, a bool ``retryable`` or
    none, no ``extend_seconds``), read without pydantic; None for anything else, which
    :meth:`ResponseParser._fields` validates in full. Other keys of the value are
    ignored, as there."""
    if fields != _DEFAULT_FIELDS or value.get("extend_seconds") is not None:
        return None
    status = value.get("status", "succeeded")
    attempt = value.get("attempt")
    retryable = value.get("retryable")
    if (type(status) is not str or status not in _FINAL
            or not (retryable is None or type(retryable) is bool)):
        return None
    if attempt is None:
        header = headers.get(ATTEMPT_HEADER)
        if header:
            if not (header.isascii() and header.isdigit() and header[0] != "0"):
                return None
            attempt = int(header)
    elif type(attempt) is not int or attempt < 1:
        return None
    result, error = value.get("result"), value.get("error")
    if ((attempt is not None and attempt > INT32_MAX) or json_problem(result) is not None
            or json_problem(error) is not None):
        return None  # the full validation refuses it, with its reason
    return _Fields(status, attempt, retryable, result, error, None)


# ------------------------------------------------------------------------------------------


def dedup_key(record: Any) -> str:
    return f"kafka:{record.topic}:{record.partition}:{record.offset}:{record.timestamp}"


def _headers(raw: Sequence[tuple[str, bytes | None]] | None) -> dict[str, str]:
    return {name: (value or b"").decode("utf-8", "replace") for name, value in raw or ()}


def _storable_key(key: str) -> str:
    if len(key) > MAX_KEY_CHARS or text_problem(key) is not None:
        raise MalformedMessage(f"the correlation key is not storable (NUL characters, lone "
                               f"surrogates or over {MAX_KEY_CHARS} characters)")
    return key


def _json_object(raw: bytes | None) -> dict[str, Any]:
    if raw is None:
        raise MalformedMessage("the message has no value")
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise MalformedMessage("the value is not JSON") from None
    if not isinstance(value, dict):
        raise MalformedMessage(f"the value is JSON {type(value).__name__}, not an object")
    return value


def _get(value: Mapping[str, Any], path: str) -> Any:
    """The field at ``path`` (:func:`hipq.paths.lookup`), None where there is none."""
    found = lookup(value, path)
    return None if found is MISSING else found


class FetchPace:
    """How long the broker may hold a fetch that finds nothing new (aiokafka's
    ``fetch_max_wait_ms``): ``kafka.fetch_max_wait_ms`` while no response came for
    :data:`BUSY_SECONDS`, ``kafka.fetch_max_wait_busy_ms`` while they flow.

    A broker that answers a waiting fetch as soon as a message arrives (Kafka) makes
    the two the same but for the cost of idle fetches; one that holds the fetch for its
    whole wait (Tansu) adds up to that wait to every response's way in, which under
    load is most of a round trip. The short wait while responses flow costs about a
    hundred small fetches a second (4% of a core at 10 ms), the long one while quiet
    about 0.3%. The first response after a quiet spell waits at most the long wait.
    ``client_options: {fetch_max_wait_ms: ...}`` fixes the wait (no pacing)."""

    def __init__(self, config: KafkaConfig, monotonic: Callable[[], float]) -> None:
        self.idle_ms = config.fetch_max_wait_ms
        self.busy_ms = config.fetch_max_wait_busy_ms
        self.fixed = "fetch_max_wait_ms" in config.client_options
        self.monotonic = monotonic
        self.current = self.idle_ms
        self._busy_until = 0.0
        self._fetcher: Any = None

    def attach(self, consumer: AIOKafkaConsumer) -> None:
        """A started consumer: busy first (responses may be waiting)."""
        fetcher = getattr(consumer, "_fetcher", None)
        self._fetcher = fetcher if hasattr(fetcher, "_fetch_max_wait_ms") else None
        self.current = self.idle_ms
        self.busy()

    def busy(self) -> None:
        """Messages came: short waits until BUSY_SECONDS after the last of them."""
        self._busy_until = self.monotonic() + BUSY_SECONDS
        self._set(self.busy_ms)

    def quiet(self) -> None:
        """A poll found nothing: back to the long wait once the busy time is over."""
        if self.current != self.idle_ms and self.monotonic() >= self._busy_until:
            self._set(self.idle_ms)

    def _set(self, wait_ms: int) -> None:
        if wait_ms == self.current or self.fixed or self._fetcher is None:
            return
        self.current = wait_ms
        self._fetcher._fetch_max_wait_ms = wait_ms  # read for each fetch request built


class KafkaResponseConsumer:
    """Consumes ``kafka.response_topics`` into the inbox until :meth:`stop`."""

    def __init__(self, config: KafkaConfig, store: Store, *, clock: Clock | None = None,
                 engine: EngineLink | None = None, pause_file: str | None = None,
                 signer: Signer | None = None) -> None:
        if config.require_signed_responses and signer is None:
            raise ValueError("kafka.require_signed_responses needs the daemon's signer")
        self.config = config
        self.store = store
        self.clock = clock or SystemClock()
        self.engine = engine  # told of the inbox rows a batch became, once committed
        self.stats = ConsumerStats()
        self.parser = ResponseParser(
            config.response_fields, signer=signer if config.require_signed_responses else None)
        self.assigned = asyncio.Event()  # set once the group gave us partitions
        self._pause_file = pause_file
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._templates_at = float("-inf")
        self._failures = 0
        self._committing: asyncio.Task[None] | None = None  # the commit in flight
        self.pace = FetchPace(config, self.clock.monotonic)
        self._writing: asyncio.Task[Batches | None] | None = None  # the batch being written

    def start(self) -> None:
        if not self.config.response_topics:
            log.info("no kafka.response_topics: the Kafka response consumer is off")
            return
        self._task = asyncio.create_task(self._run(), name="hipq-kafka-consumer")

    async def stop(self) -> None:
        self._stopping.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), STOP_GRACE_SECONDS)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- the loop ----------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping.is_set():
            consumer = self._new_consumer()
            try:
                await consumer.start()
                self.stats.connects += 1
                log.info("Kafka response consumer joined group %s on %s", self.config.group_id,
                         ", ".join(self.config.response_topics),
                         extra={"action": "kafka_consumer_start"})
                await self._consume(consumer)
            except Exception as exc:  # never let the consumer die: log, back off, reconnect
                self.stats.errors += 1
                self._failures += 1
                delay = self._backoff()
                log.warning("Kafka response consumer error (%s: %s); reconnecting in %.1fs",
                            type(exc).__name__, exc, delay,
                            exc_info=not isinstance(exc, KafkaError | OSError),
                            extra={"action": "kafka_consumer_down"})
                await self._wait(delay)
            finally:
                self.assigned.clear()
                with contextlib.suppress(KafkaCommitStuck):  # a stop waits for it
                    await self._commit_settled(cancel=not self._stopping.is_set())
                await _stop_quietly(consumer)

    def _new_consumer(self) -> AIOKafkaConsumer:
        c = self.config
        options = {"fetch_max_wait_ms": c.fetch_max_wait_ms, **c.client_options}
        return AIOKafkaConsumer(
            *c.response_topics, bootstrap_servers=c.bootstrap_servers, group_id=c.group_id,
            client_id=c.client_id, enable_auto_commit=False,
            auto_offset_reset=c.auto_offset_reset, session_timeout_ms=c.session_timeout_ms,
            heartbeat_interval_ms=c.heartbeat_interval_ms, max_poll_records=c.max_poll_records,
            **options)

    async def _consume(self, consumer: AIOKafkaConsumer) -> None:
        """Poll, parse, write, in a pipeline (issue 28): while one batch is being
        written to the inbox, the next one is polled and parsed; it is written once
        the first one is (writes, and so commits, stay in order, one at a time)."""
        pace = self.pace
        pace.attach(consumer)
        try:
            while not self._stopping.is_set():
                batches = await self._poll(consumer)
                if batches:
                    pace.busy()
                    await self._pipeline(consumer, batches)
                elif self._writing is not None:  # nothing more to parse meanwhile
                    await self._written()
                else:
                    pace.quiet()
                    await rewind_truncated(consumer)
            await self._written()  # stopping: the batch in hand is written and committed
        finally:
            task, self._writing = self._writing, None
            if task is not None:  # an error or a cancel: not committed, read again
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def _poll(self, consumer: AIOKafkaConsumer) -> Batches:
        """The next records (at once if a batch is being written: the wait is its)."""
        batches: Batches = await consumer.getmany(
            timeout_ms=POLL_TIMEOUT_MS if self._writing is None else 0,
            max_records=self.config.max_poll_records)
        if consumer.assignment():
            self.assigned.set()
        self._failures = 0
        if self._committing is not None and self._committing.done():
            await self._commit_settled()  # raises KafkaCommitStuck
        return batches

    async def _pipeline(self, consumer: AIOKafkaConsumer, batches: Batches) -> None:
        """Parse ``batches`` while the previous batch is written, then write them."""
        parsed = await self._parse_batch([r for rs in batches.values() for r in rs])
        failed = await self._written()
        if failed is not None:  # not written: read again from the first of either
            for tp, records in batches.items():  # (polled before or after its rewind)
                earlier = failed.get(tp)
                consumer.seek(tp, min(records[0].offset, earlier[0].offset) if earlier
                              else records[0].offset)
            return
        self._writing = asyncio.create_task(self._write(consumer, batches, parsed))

    async def _written(self) -> Batches | None:
        """Wait for the batch being written; what :meth:`_write` returned."""
        task, self._writing = self._writing, None
        return None if task is None else await task

    async def _write(self, consumer: AIOKafkaConsumer, batches: Batches,
                     parsed: Sequence[tuple[Any, Response]]) -> Batches | None:
        """Write a parsed batch to the inbox, then commit past it; ``batches`` if it
        could not be written (its partitions are rewound to it, after a back-off)."""
        try:
            ids, written = await self._insert(parsed)
        except TransientStoreError as exc:
            self.stats.errors += 1
            for tp, records in batches.items():  # nothing committed: read them again
                consumer.seek(tp, records[0].offset)
            self._failures += 1
            delay = self._backoff()
            log.warning("cannot write Kafka responses to the inbox (%s); retrying in %.1fs",
                        exc, delay, extra={"action": "kafka_inbox_error"})
            await self._wait(delay)
            return batches
        if written and self.engine is not None:
            self.engine.responses_written(written)
        fresh = sum(1 for i in ids if i is not None)
        self.stats.inserted += fresh
        self.stats.duplicates += len(ids) - fresh
        await self._pause_point(len(ids))
        await self._commit_behind(consumer, {tp: records[-1].offset + 1
                                             for tp, records in batches.items() if records})
        if fresh and self.engine is not None:
            self.engine.work_arrived()
        return None

    async def _insert(self, parsed: Sequence[tuple[Any, Response]]
                      ) -> tuple[list[int | None], list[InboxRow]]:
        """Insert the batch; if the database refuses it (not merely down), insert
        message by message and skip those it refuses. Returns the ids (None: a
        duplicate) and the rows written. Raises only :class:`TransientStoreError`
        (then nothing may be committed)."""
        now = self.clock.now()
        responses = [r for _, r in parsed]
        try:
            ids = await self.store.inbox_insert_many(responses, now=now)
            return ids, written_rows(responses, ids, now)
        except TransientStoreError:
            raise
        except Exception as exc:  # a message the database will not hold: find it
            if len(parsed) <= 1:
                self._skip(parsed[0][0] if parsed else None, exc)
                return [], []
        ids = []
        written: list[InboxRow] = []
        for record, response in parsed:
            try:
                one = await self.store.inbox_insert_many([response], now=now)
            except TransientStoreError:
                raise
            except Exception as exc:
                self._skip(record, exc)
                continue
            ids += one
            written += written_rows([response], one, now)
        return ids, written

    def _skip(self, record: Any, exc: BaseException) -> None:
        self.stats.malformed += 1
        where = ("?", -1, -1) if record is None else (record.topic, record.partition,
                                                      record.offset)
        log.warning("skipping a Kafka response the database refused at %s/%d offset %d: %s",
                    *where, type(exc).__name__, extra={"action": "kafka_response_malformed"})

    async def _parse_batch(self, records: Sequence[Any]) -> list[tuple[Any, Response]]:
        """Parse a polled batch. A message that no template matched may answer a
        queue created or changed since the templates were read: the templates are
        read again (once per batch) and such messages parsed again before they are
        given up as malformed."""
        refreshed = await self._refresh_templates()
        parsed: list[tuple[Any, Response]] = []
        keyless: list[Any] = []
        for record in records:
            self.stats.consumed += 1
            try:
                parsed.append((record, self.parser.parse(record)))
            except NoCorrelationKey as exc:
                if refreshed:
                    self._parse_failed(record, exc)
                else:
                    keyless.append(record)
            except MalformedMessage as exc:
                self._parse_failed(record, exc)
        if keyless:
            await self._refresh_templates(force=True)
            for record in keyless:
                response = self._parse(record)
                if response is not None:
                    parsed.append((record, response))
        return parsed

    def _parse(self, record: Any) -> Response | None:
        try:
            return self.parser.parse(record)
        except MalformedMessage as exc:
            self._parse_failed(record, exc)
            return None

    def _parse_failed(self, record: Any, exc: MalformedMessage) -> None:
        if isinstance(exc, ForgedResponse):
            self.stats.forged += 1
            log.warning("dropping a Kafka response without a valid signature at %s/%d "
                        "offset %d: %s", record.topic, record.partition, record.offset, exc,
                        extra={"action": "kafka_response_forged"})
            return
        self.stats.malformed += 1
        log.warning("skipping a malformed Kafka response at %s/%d offset %d: %s",
                    record.topic, record.partition, record.offset, exc,
                    extra={"action": "kafka_response_malformed"})

    # -- commits that do not block the next poll (issue 12) ----------------------------

    async def _commit_behind(self, consumer: AIOKafkaConsumer,
                             offsets: dict[TopicPartition, int]) -> None:
        """Start committing ``offsets`` (written to the inbox already) and return:
        the previous commit is awaited first, so commits stay in order, one at a
        time. Raises :class:`KafkaCommitStuck` from the previous commit."""
        await self._commit_settled()
        self._committing = asyncio.create_task(self._commit(consumer, offsets))

    async def _commit_settled(self, *, cancel: bool = False) -> None:
        """Wait for the commit in flight (``cancel``: abandon it; the messages are
        read again and de-duplicated)."""
        task, self._committing = self._committing, None
        if task is None:
            return
        if cancel:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, KafkaCommitStuck):
                await task
            return
        await task

    # ------------------------------------------------------------------------------------

    async def _commit(self, consumer: AIOKafkaConsumer, offsets: dict[TopicPartition, int]) -> None:
        """Commit past the batch. A failed commit only means re-delivery, which the
        inbox de-duplicates. aiokafka retries some commit errors for ever (a topic
        that vanished with a broker's data): after a session timeout without
        success the consumer reconnects instead."""
        limit = max(self.config.session_timeout_ms / 1000, 1.0)
        try:
            await asyncio.wait_for(consumer.commit(offsets), limit)
            self.stats.commits += 1
        except KafkaError as exc:  # e.g. a rebalance
            self.stats.commit_failures += 1
            log.warning("Kafka offset commit failed (%s: %s); the messages will be read again "
                        "and de-duplicated", type(exc).__name__, exc,
                        extra={"action": "kafka_commit_failed"})
        except TimeoutError:
            self.stats.commit_failures += 1
            raise KafkaCommitStuck(f"no offset commit within {limit:g}s") from None

    async def _refresh_templates(self, *, force: bool = False) -> bool:
        """Read the queues' response templates if the last read is older than
        TEMPLATE_REFRESH_SECONDS (or ``force``); whether they were read now."""
        if not force and self.clock.monotonic() - self._templates_at < TEMPLATE_REFRESH_SECONDS:
            return False
        try:
            queues = await self.store.queue_list()
        except HipqError as exc:
            log.warning("cannot refresh queue correlation templates: %s", exc)
            return False
        self._templates_at = self.clock.monotonic()
        found = ((q.id, CorrelationConfig.model_validate(q.settings["correlation"]))
                 for q in queues if q.settings.get("correlation") is not None)
        self.parser.correlations = dict(sorted(
            (queue, c) for queue, c in found if c.response or c.plugin))
        return True

    async def _pause_point(self, written: int) -> None:
        """Test hook: stop between the inbox insert and the commit (see module doc)."""
        if not self._pause_file or not written:
            return
        await asyncio.to_thread(Path(self._pause_file).write_text,
                                json.dumps({"written": written}), encoding="utf-8")
        log.warning("test hook: pausing the Kafka consumer before its commit",
                    extra={"action": "kafka_test_pause"})
        await asyncio.Event().wait()

    def _backoff(self) -> float:
        return float(min(self.config.reconnect_backoff_seconds * 2 ** max(self._failures - 1, 0),
                         self.config.reconnect_backoff_max_seconds))

    async def _wait(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)


async def rewind_truncated(consumer: AIOKafkaConsumer) -> None:
    """Seek to the start of partitions whose log now ends before our position.

    A broker that lost its data (or a re-created topic) numbers offsets from 0
    again. Kafka answers a fetch past the end with OFFSET_OUT_OF_RANGE and the
    consumer resets, but some brokers (Tansu) answer with nothing, which would
    skip every new message until the offsets catch up. Reading the new log from
    its start is safe: the inbox de-duplicates."""
    for tp in consumer.assignment():
        end = consumer.highwater(tp)
        if end is None:
            continue
        position = await consumer.position(tp)
        if position > end:
            log.warning("Kafka partition %s/%d ends at offset %d, before our position %d "
                        "(the broker lost data?); reading it from its start", tp.topic,
                        tp.partition, end, position, extra={"action": "kafka_rewind"})
            await consumer.seek_to_beginning(tp)


async def _stop_quietly(consumer: AIOKafkaConsumer) -> None:
    try:
        await consumer.stop()
    except Exception as exc:  # closing a broken client must not hide the first error
        log.debug("error while stopping the Kafka consumer: %r", exc)

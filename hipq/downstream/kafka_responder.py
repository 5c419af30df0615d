"""``KafkaResponder``: the downstream side of a Kafka launch.

It consumes launches from ``request_topic`` (a consumer group, offsets committed
by hand), runs the handler on each (at most ``concurrency`` at a time within a
fetched batch, in the order fetched), produces each outcome to ``response_topic`` with the launch's
``Hipq-Correlation-Key`` header (or, with ``correlation_header=False``, without it:
for a queue that matches responses by a template over the value, e.g.
``{value.result.orderId}``), waits for the
broker's acknowledgements, and only then commits the batch's offsets. Each
response also carries the launch's ``Hipq-Signature`` header as it came, so a hipq
with ``kafka.require_signed_responses`` takes it (docs/kafka.md, "Signed
responses"): the responder never holds hipq's signing key, and the signature names
that try of that job only, so it completes nothing else. A responder
that dies before the commit handles those launches again after a restart; hipq
applies a repeated response once.

A record it cannot read (a key or correlation header that is not UTF-8, a null
value, a value that is not JSON or is nested too deep, a launch whose correlation
key cannot be sent back) is logged with its topic, partition, offset and a short
reason (never its value) and skipped; the batch's offsets are committed as usual,
so a bad record is read once and never stops the responder. A handler's result
that cannot be encoded as JSON is answered as a failure (see ``encode_outcome``).

aiokafka is imported when :meth:`KafkaResponder.run` starts, so importing
``hipq.downstream`` does not load it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from hipq.downstream._launch import BadLaunch, Handler, Launch, encode_outcome, outcome

log = logging.getLogger(__name__)

CORRELATION_HEADER = "Hipq-Correlation-Key"
SIGNATURE_HEADER = "Hipq-Signature"  # copied from the launch onto its response
POLL_MS = 200
MAX_RECORDS = 2000
COMMIT_SECONDS = 10.0  # an offset commit longer than this: reconnect
RECONNECT_SECONDS, MAX_RECONNECT_SECONDS = 0.5, 5.0
UNREADABLE = (ValueError, TypeError, RecursionError)  # and BadLaunch, a ValueError


class KafkaResponder:
    def __init__(self, bootstrap_servers: str, request_topic: str, response_topic: str,
                 handler: Handler, group_id: str = "hipq-responder", *,
                 concurrency: int = 100, consumer_options: Mapping[str, Any] | None = None,
                 producer_options: Mapping[str, Any] | None = None,
                 correlation_header: bool = True) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.request_topic = request_topic
        self.response_topic = response_topic
        self.handler = handler
        self.group_id = group_id
        self.consumer_options = dict(consumer_options or {})
        self.producer_options = dict(producer_options or {})
        self.concurrency = concurrency
        self.correlation_header = correlation_header
        self._stopping = asyncio.Event()
        self.handled = 0  # launches answered (acknowledged and committed)

    def stop(self) -> None:
        """Ask :meth:`run` to return after the batch in hand is answered."""
        self._stopping.set()

    async def run(self, *, ready: asyncio.Event | None = None) -> None:
        """Answer launches until :meth:`stop`. A broken connection, a broker that
        lost its data or a commit that never finishes is logged, and the responder
        connects again (after 0.5 s, doubling to 5 s); ``ready`` is set once the
        first connection is up."""
        failures = 0
        while not self._stopping.is_set():
            try:
                await self._connected(ready)
                return
            except Exception as exc:  # never stop answering: log, back off, reconnect
                failures += 1
                delay = min(RECONNECT_SECONDS * 2 ** (failures - 1), MAX_RECONNECT_SECONDS)
                log.warning("Kafka responder error (%s: %s); reconnecting in %.1fs",
                            type(exc).__name__, exc, delay, extra={"action": "responder_down"})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)

    async def _connected(self, ready: asyncio.Event | None) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        from hipq.responses.kafka_consumer import rewind_truncated

        consumer = AIOKafkaConsumer(
            self.request_topic, bootstrap_servers=self.bootstrap_servers,
            group_id=self.group_id, enable_auto_commit=False,
            **{"auto_offset_reset": "earliest", **self.consumer_options})
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap_servers,
                                    **{"acks": "all", "linger_ms": 5, **self.producer_options})
        try:
            await producer.start()
            await consumer.start()
            if ready is not None:
                ready.set()
            while not self._stopping.is_set():
                batches = await consumer.getmany(timeout_ms=POLL_MS, max_records=MAX_RECORDS)
                if batches:
                    await self._answer(producer, [r for rs in batches.values() for r in rs])
                    await self._commit(consumer, {tp: rs[-1].offset + 1
                                                  for tp, rs in batches.items()})
                else:  # a broker that lost its data numbers offsets from 0 again
                    await rewind_truncated(consumer)
        finally:
            for client in (consumer, producer):
                with contextlib.suppress(Exception):
                    await client.stop()

    async def _commit(self, consumer: Any, offsets: dict[Any, int]) -> None:
        """After the batch's answers were acknowledged. A failed commit means the
        launches are read and answered again (hipq applies a repeated response
        once). aiokafka retries some commit errors for ever (a topic gone with a
        broker's data): past ``COMMIT_SECONDS`` the responder reconnects."""
        from aiokafka.errors import KafkaError

        try:
            await asyncio.wait_for(consumer.commit(offsets), COMMIT_SECONDS)
        except KafkaError as exc:
            log.warning("offset commit failed (%s: %s); these launches will be answered "
                        "again", type(exc).__name__, exc, extra={"action": "responder_commit"})
        except TimeoutError:
            raise ConnectionError(f"no offset commit within {COMMIT_SECONDS:g}s") from None

    async def _answer(self, producer: Any, records: Sequence[Any]) -> None:
        # ``concurrency`` workers share the batch (not a task per record): a handler
        # that never waits costs no task, one that waits lets the others go on
        bodies: list[Answer | None] = [None] * len(records)
        todo = iter(enumerate(records))

        async def work() -> None:
            for index, record in todo:
                bodies[index] = await self._handle(record)

        await asyncio.gather(*(work() for _ in range(min(self.concurrency, len(records)))))
        topic, header = self.response_topic, self.correlation_header
        acks = [await producer.send(topic, value=answer.value,
                                    headers=answer.headers(correlation=header))
                for answer in filter(None, bodies)]
        await asyncio.gather(*acks)
        self.handled += len(acks)

    async def _handle(self, record: Any) -> Answer | None:
        """The response to a launch record; None for a record that cannot be read
        (logged and skipped)."""
        try:
            launch, key = _read_launch(record)
        except UNREADABLE as exc:
            log.warning("skipped a record that is not a launch (%s[%s]@%s): %s: %.200s",
                        record.topic, record.partition, record.offset, type(exc).__name__,
                        exc, extra={"action": "bad_launch"})
            return None
        signature = dict(record.headers or ()).get(SIGNATURE_HEADER)
        return Answer(key, encode_outcome(await outcome(self.handler, launch)),
                      signature if isinstance(signature, bytes) else None)


class Answer(NamedTuple):
    """A response to produce: the launch's correlation key and signature (as they
    came) and the encoded outcome."""

    key: bytes
    value: bytes
    signature: bytes | None

    def headers(self, *, correlation: bool) -> list[tuple[str, bytes]] | None:
        headers = [(CORRELATION_HEADER, self.key)] if correlation else []
        if self.signature is not None:
            headers.append((SIGNATURE_HEADER, self.signature))
        return headers or None


def _read_launch(record: Any) -> tuple[Launch, bytes]:
    """The launch in a consumer record and its correlation key as it goes back.
    Raises :data:`UNREADABLE`: ``UnicodeError`` (a key or header that is not UTF-8,
    a key with a lone surrogate), ``BadLaunch`` (a null value, not a launch),
    ``ValueError`` (not JSON), ``RecursionError`` (nested too deep)."""
    header = dict(record.headers or ()).get(CORRELATION_HEADER) or record.key
    key = header.decode() if isinstance(header, bytes) else None
    if record.value is None:
        raise BadLaunch("a null value")
    launch = Launch.from_json(json.loads(record.value), correlation_key=key)
    return launch, launch.correlation_key.encode()

"""The counterpart of bench/run's ``kafka-c1000`` and ``kafka-unlimited`` phases, written
with confluent-kafka (librdkafka), in its own process: consumes launches from the
request topic and answers each on the response topic, until terminated. It is "the
other side" of the round trip and must not be its bottleneck: no asyncio, no pydantic,
batches on both sides, librdkafka's own threads doing the network work.

    python bench/kafka_confluent_responder.py --bootstrap HOST:PORT --requests T
                                              --responses T [--header]

The response value is the kit's (``hipq.downstream.KafkaResponder``): ``{"status":
"succeeded", "attempt": N, "result": {"orderId", "version", "t": [A, B]}}``. Without
``--header`` it carries no correlation header and the queue matches it by the template
``{value.result.orderId}:{value.result.version}`` (bench/kafka_responder.py's
``KIT_TEMPLATE``); with ``--header`` it carries the launch's ``Hipq-Correlation-Key``
header (and the launch's value is not decoded: the attempt comes from the
``Hipq-Attempt`` header). ``t`` is the timing the benchmark reads back from the archived
jobs: A = the launch message's timestamp (set by hipq's producer when the launch was
handed to it), B = when this process got it (epoch milliseconds, both).

The loop: ``consume(num_messages=...)`` drains what librdkafka has fetched (blocking only
while nothing is there); every launch is answered with ``produce()``; ``poll(0)``
serves the delivery reports; a consumed batch's offsets are committed (asynchronously,
in batch order) once every answer of that batch was acknowledged by the broker, so a
responder killed in between answers those launches again (hipq applies a repeated
response once). Prints ``READY`` once the consumer has its partitions.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import uuid
from collections import deque
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

HEADER = "Hipq-Correlation-Key"
ATTEMPT_HEADER = "Hipq-Attempt"
BATCH = 5000  # messages per consume() call
IDLE_WAIT = 0.05  # consume() blocks at most this long when nothing was fetched
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


class _Batch:
    """One consumed batch: answers not yet acknowledged, and its offsets."""

    __slots__ = ("failed", "left", "offsets")

    def __init__(self, left: int, offsets: dict[tuple[str, int], int]) -> None:
        self.left = left
        self.offsets = offsets
        self.failed = False


class Responder:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stopping = False
        self.answered = 0
        self.consumer = Consumer({
            "bootstrap.servers": args.bootstrap,
            "group.id": f"bench-confluent-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "fetch.wait.max.ms": args.fetch_wait_ms,  # the broker answers at once with data
            "fetch.min.bytes": 1,
            "queued.min.messages": 100000,  # prefetch: the next batch is already here
        })
        self.producer = Producer({
            "bootstrap.servers": args.bootstrap,
            "acks": "all",
            "linger.ms": args.linger_ms,
            "batch.num.messages": 10000,
            "batch.size": 1 << 20,
            "enable.idempotence": False,  # Tansu refuses InitProducerId
            "queue.buffering.max.messages": 1_000_000,
        })
        self.pending: deque[_Batch] = deque()

    def run(self) -> None:
        self.consumer.subscribe([self.args.requests], on_assign=self._assigned)
        self._ready = False
        try:
            while not self.stopping:
                wait = 0.005 if self.pending else IDLE_WAIT
                messages = self.consumer.consume(num_messages=1, timeout=wait)
                if messages:  # something is here: take what else was fetched, no waiting
                    messages += self.consumer.consume(num_messages=BATCH - 1, timeout=0)
                    self._answer(messages)
                self.producer.poll(0)
                self._commit_done()
        finally:
            self.producer.flush(10)
            self.producer.poll(0)
            self._commit_done()
            self.consumer.close()

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions and not self._ready:
            self._ready = True
            print("READY", flush=True)

    def _answer(self, messages: list[Message]) -> None:
        header_form = self.args.header
        topic, produce = self.args.responses, self.producer.produce
        offsets: dict[tuple[str, int], int] = {}
        batch = _Batch(0, offsets)
        now_ms = int(time.time() * 1000)

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            batch.left -= 1
            if err is not None:
                batch.failed = True

        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    print(f"consume error: {err}", file=sys.stderr, flush=True)
                continue
            offsets[(msg.topic(), msg.partition())] = msg.offset() + 1
            headers = dict(msg.headers() or ())
            stamp = [msg.timestamp()[1], now_ms]
            if header_form:
                attempt = int(headers.get(ATTEMPT_HEADER) or 1)
                value = _ENCODE({"status": "succeeded", "attempt": attempt,
                                 "result": {"t": stamp}})
                out_headers: Any = [(HEADER, headers[HEADER])]
            else:
                launch = json.loads(msg.value())  # type: ignore[arg-type]
                data = launch["data"]
                value = _ENCODE({"status": "succeeded", "attempt": launch["attempt"],
                                 "result": {"orderId": data["orderId"],
                                            "version": data["version"], "t": stamp}})
                out_headers = None
            while True:
                try:
                    produce(topic, value=value, headers=out_headers, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    self.producer.poll(0.01)
            batch.left += 1
        self.pending.append(batch)
        self.answered += batch.left

    def _commit_done(self) -> None:
        """Commit the batches whose answers were all acknowledged, in order."""
        offsets: dict[tuple[str, int], int] = {}
        while self.pending and self.pending[0].left <= 0:
            batch = self.pending.popleft()
            if batch.failed:  # answered again after a restart; hipq applies it once
                print("some answers were not acknowledged", file=sys.stderr, flush=True)
            offsets.update(batch.offsets)
        if offsets:
            self.consumer.commit(offsets=[TopicPartition(t, p, o)
                                          for (t, p), o in offsets.items()],
                                 asynchronous=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--requests", required=True)
    parser.add_argument("--responses", required=True)
    parser.add_argument("--header", action="store_true")
    parser.add_argument("--linger-ms", type=float, default=1.0)
    parser.add_argument("--fetch-wait-ms", type=int, default=10)
    responder = Responder(parser.parse_args())

    def stop(*_: Any) -> None:
        responder.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    responder.run()


if __name__ == "__main__":
    main()

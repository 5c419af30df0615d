"""The chaos harness's Kafka downstream, a process of its own (``bench/chaos.py`` starts it).

    python bench/chaos_kafka_responder.py --bootstrap HOST:PORT --requests TOPIC
        --responses TOPIC --timeout SECONDS [--fail 0.2] [--seed 1] [--max-delay 0.1]

Prints ``PORT=<n>`` once its dump endpoint listens on 127.0.0.1. A plain aiokafka
loop (it needs each record's timestamp, and never blocks its polls on a commit:
offsets are auto-committed, and lost with the broker anyway). It consumes the
launches of a Kafka queue from ``--requests`` (a consumer group of its own) and,
after a random delay of up to ``--max-delay`` seconds, answers each on
``--responses`` with the launch's ``Hipq-Correlation-Key`` header. A share
``--fail`` of the tries fail (retryable: the queue is ``at_least_once``), the
others succeed. A reply that cannot be produced (the broker is down) is dropped:
the try then times out at hipq and is tried again.

The broker may be restarted under it (Tansu forgets everything): the consumer
reconnects, and when a partition's new log ends before its position it reads
that log from its start (``rewind_truncated``: Tansu answers a fetch past the
end with nothing rather than OFFSET_OUT_OF_RANGE).

It records every launch received, ``(queue, id, attempt, arrival, produced, answered)``
(``produced`` is the record's timestamp, ``answered`` the moment its reply was
handed to the producer) and computes the launches outstanding per queue, as the
HTTP downstream does, and their peak: the concurrency the downstream sees.
Unlike an HTTP launch, a Kafka launch can outlive its try at hipq: hipq stops
waiting at the try's deadline (``timeout_seconds`` after it marked the job
running, always before the message's timestamp plus ``timeout_seconds``), or as
soon as the producer gives up on the message (``delivery_timeout_seconds``),
and then frees the slot, while the message, delivered after all or held up by
the broker restart, still reaches this responder. So ``peak`` counts a launch
as outstanding only while hipq can still be waiting for it: from its arrival
until it is answered, cut at its timestamp plus ``--timeout`` minus
``--margin`` and at the arrival of a later attempt of the same job; an earlier
attempt arriving after a later one is not counted, and a job is counted once
(a re-delivered launch of the same try is not a second slot). ``peak_raw``
counts every launch from arrival to answer, without those cuts.

``GET /_dump`` returns ``{"launches": [[queue, id, attempt, arrival time.time()],
...], "peak": {...}, "peak_raw": {...}, "answered": n, "send_errors": n,
"rewinds": n, "stale": n, "cut": n}``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from chaos_downstream import serve

from hipq.responses.kafka_consumer import rewind_truncated

CORRELATION_HEADER = "Hipq-Correlation-Key"
SESSION = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 200}


@dataclass(slots=True)
class Received:
    queue: str
    id: str
    attempt: int
    arrival: float
    produced: float
    answered: float | None = None


def peaks(launches: list[Received], timeout: float, margin: float,
          now: float) -> tuple[dict[str, int], dict[str, int], int, int]:
    """(peak, peak_raw, stale, cut): see the module's docstring."""
    raw_events: list[tuple[float, int, str]] = []
    for r in launches:
        raw_events.append((r.arrival, 1, r.queue))
        raw_events.append((now if r.answered is None else r.answered, -1, r.queue))
    peak_raw = _sweep((t, d, q) for t, d, q in raw_events)

    # per job, in arrival order: a try is live until answered, its deadline, or the
    # arrival of a later try of the job; an earlier try arriving later is stale
    by_job: dict[tuple[str, str], list[Received]] = collections.defaultdict(list)
    for r in launches:
        by_job[(r.queue, r.id)].append(r)
    events: list[tuple[float, int, str]] = []
    stale = cut = 0
    for (queue, _), tries in by_job.items():
        tries.sort(key=lambda r: r.arrival)
        top = 0
        intervals: list[tuple[float, float]] = []
        for n, r in enumerate(tries):
            if r.attempt < top:
                stale += 1
                continue
            top = r.attempt
            end = now if r.answered is None else r.answered
            deadline = r.produced + timeout - margin
            later = [o.arrival for o in tries[n + 1:] if o.attempt > r.attempt]
            limit = min([deadline, *later])
            if limit < end:
                cut += 1
                end = limit
            if end > r.arrival:
                intervals.append((r.arrival, end))
        # the same job counts once: merge its overlapping intervals
        intervals.sort()
        merged: list[list[float]] = []
        for start, end in intervals:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        for start, end in merged:
            events.append((start, 1, queue))
            events.append((end, -1, queue))
    return _sweep(events), peak_raw, stale, cut


def _sweep(events: Any) -> dict[str, int]:
    outstanding: dict[str, int] = collections.Counter()
    peak: dict[str, int] = {}
    # at equal times an end goes before a start
    for _, delta, queue in sorted(events, key=lambda e: (e[0], e[1])):
        outstanding[queue] += delta
        peak[queue] = max(peak.get(queue, 0), outstanding[queue])
    return peak


class Responder:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.launches: list[Received] = []
        self.answered = 0
        self.send_errors = 0
        self.rewinds = 0
        self.bad = 0
        self.tasks: set[asyncio.Task[None]] = set()
        self.producer: AIOKafkaProducer | None = None

    async def run(self) -> None:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.args.bootstrap, acks="all",
                                         linger_ms=2, request_timeout_ms=5000,
                                         retry_backoff_ms=200)
        await self.producer.start()
        consumer = AIOKafkaConsumer(
            self.args.requests, bootstrap_servers=self.args.bootstrap,
            group_id=self.args.group, auto_offset_reset="earliest", enable_auto_commit=True,
            auto_commit_interval_ms=500, retry_backoff_ms=200, **SESSION)
        await consumer.start()
        try:
            while True:
                try:
                    batches = await consumer.getmany(timeout_ms=200, max_records=2000)
                    if not batches:
                        before = {tp: await consumer.position(tp)
                                  for tp in consumer.assignment()}
                        await rewind_truncated(consumer)
                        after = {tp: await consumer.position(tp) for tp in before}
                        self.rewinds += sum(1 for tp in before if after[tp] < before[tp])
                except KafkaError:
                    await asyncio.sleep(0.2)
                    continue
                now = time.time()
                for records in batches.values():
                    for record in records:
                        self._receive(record, now)
        finally:
            await consumer.stop()

    def _receive(self, record: Any, now: float) -> None:
        try:
            body = json.loads(record.value)
            headers = {k: v.decode() for k, v in record.headers or ()}
            key = headers.get(CORRELATION_HEADER) or record.key.decode()
            launch = Received(str(body["queue"]), str(body["id"]), int(body["attempt"]),
                              now, record.timestamp / 1000.0)
        except (ValueError, KeyError, TypeError, AttributeError):
            self.bad += 1
            return
        self.launches.append(launch)
        task = asyncio.create_task(self._respond(launch, key))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _respond(self, launch: Received, key: str) -> None:
        await asyncio.sleep(self.rng.random() * self.args.max_delay)
        if self.rng.random() < self.args.fail:
            body: dict[str, Any] = {"status": "failed", "retryable": True,
                                    "attempt": launch.attempt, "error": {"message": "chaos"}}
        else:
            body = {"status": "succeeded", "attempt": launch.attempt, "result": {"ok": True}}
        launch.answered = time.time()
        assert self.producer is not None
        try:
            await self.producer.send_and_wait(
                self.args.responses, value=json.dumps(body).encode(), key=key.encode(),
                headers=[(CORRELATION_HEADER, key.encode())])
            self.answered += 1
        except KafkaError:  # the broker is down: the reply is lost, the try times out
            self.send_errors += 1

    async def dump(self, _request: web.Request) -> web.Response:
        now = time.time()
        peak, peak_raw, stale, cut = peaks(self.launches, self.args.timeout, self.args.margin,
                                           now)
        return web.json_response({
            "launches": [[r.queue, r.id, r.attempt, r.arrival] for r in self.launches],
            "peak": peak, "peak_raw": peak_raw, "stale": stale, "cut": cut,
            "answered": self.answered, "send_errors": self.send_errors,
            "rewinds": self.rewinds, "bad": self.bad})


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--requests", required=True)
    parser.add_argument("--responses", required=True)
    parser.add_argument("--group", default="chaos-responder")
    parser.add_argument("--timeout", type=float, required=True,
                        help="the queue's timeout_seconds")
    parser.add_argument("--margin", type=float, default=1.0)
    parser.add_argument("--fail", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-delay", type=float, default=0.1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="chaos_kafka_responder: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # reconnects, rejoins: expected
    responder = Responder(args)
    app = web.Application()
    app.router.add_get("/_dump", responder.dump)
    await serve(app)
    await responder.run()


if __name__ == "__main__":
    asyncio.run(main())

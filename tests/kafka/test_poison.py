"""Poison messages on a response topic (issue 13 finding 4), against the real broker
and both stores: a response no database could hold (an attempt out of the column's
range, a NUL character, a non-finite number, a hostile depth, a NUL in the key) is
skipped, counted and logged once, and the consumer goes on with the next message:
it never re-reads the same batch forever."""

from __future__ import annotations

import json
from typing import Any

from aiokafka import AIOKafkaProducer

from tests.kafka.conftest import (
    captured,
    consumer_joined,
    create_topics,
    inbox_rows,
    kafka_settings,
    name,
    running_daemon,
    wait_until,
)

POISON: list[tuple[bytes, list[tuple[str, bytes]]]] = [
    (json.dumps({"attempt": 2**31}).encode(), []),           # over PostgreSQL's integer
    (json.dumps({"attempt": 2**63}).encode(), []),           # over SQLite's integer
    (json.dumps({"result": "a\u0000b"}).encode(), []),       # NUL in text
    (json.dumps({"result": {"k\u0000": 1}}).encode(), []),   # NUL in a key
    (b'{"result": 1e400}', []),                              # infinite once parsed
    (b'{"error": {"x": -1e400}}', []),
    (b'{"result": NaN}', []),
    (b'{"result": ' + b"[" * 100 + b"]" * 100 + b"}", []),   # deeper than 64
    (b'{"result": ' + b"[" * 5000 + b"]" * 5000 + b"}", []),  # deeper than Python's stack
    (b'{"result": "\\ud800"}', []),                          # a lone surrogate
    (b"{}", [("Hipq-Correlation-Key", b"bad\x00key")]),      # NUL in the key itself
    (b"{}", [("Hipq-Correlation-Key", b"k" * 600)]),         # a key too long to index
]


async def _send(bootstrap: str, topic: str,
                messages: list[tuple[bytes, list[tuple[str, bytes]]]], key: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for value, headers in messages:
            await producer.send_and_wait(topic, value=value, key=key, headers=headers,
                                         partition=0)
    finally:
        await producer.stop()


async def test_poison_messages_are_skipped_and_the_consumer_goes_on(
        kafka_bootstrap: str, db_url: str) -> None:
    topic = name("responses")
    await create_topics(kafka_bootstrap, topic, partitions=1)
    settings = kafka_settings(db_url, kafka_bootstrap, group=name("hipq"),
                              response_topics=[topic], queues=[])
    with captured("hipq.responses.kafka_consumer") as records:
        async with running_daemon(settings) as daemon:
            await consumer_joined(daemon)
            consumer = daemon.kafka_consumer
            assert consumer is not None
            store = daemon.store
            assert store is not None
            await _send(kafka_bootstrap, topic, POISON, key=b"poisoned")
            good: list[tuple[bytes, list[tuple[str, bytes]]]] = [
                (json.dumps({"result": {"fine": True}, "attempt": 1}).encode(), [])]
            await _send(kafka_bootstrap, topic, good, key=b"good-1")

            async def good_arrived() -> bool:
                return bool(await inbox_rows(store, "good-1"))

            await wait_until(good_arrived, within=30, what="the good response after the poison")
            rows: list[Any] = await inbox_rows(store)
            assert [r.correlation_key for r in rows] == ["good-1"]
            assert rows[0].result == {"fine": True}
            assert consumer.stats.malformed == len(POISON)
            assert consumer.stats.errors == 0  # never a failed insert, never a reconnect


            async def committed() -> bool:  # offsets past the poison: nothing is re-read
                return consumer.stats.commits >= 1

            await wait_until(committed, within=10, what="the offsets to be committed")
    skipped = [r for r in records if getattr(r, "action", "") == "kafka_response_malformed"]
    assert len(skipped) == len(POISON)  # each logged once

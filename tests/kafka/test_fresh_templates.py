"""A Kafka response is never lost to a stale template cache: the consumer reads the
queues' response templates at most every 5 s, and a response whose only match is
the template of a queue created since (by the API, or on another daemon) used to
be skipped as malformed and its offset committed, leaving its job to its timeout.
Now a batch with a message that no template matched reads the templates again
before giving up on it. On SQLite and PostgreSQL."""

from __future__ import annotations

import json

from aiokafka import AIOKafkaProducer

from hipq.bodies import EnqueueRequest
from hipq.config import QueueConfig
from hipq.testing import MemoryTarget
from tests.kafka.conftest import (
    consumer_joined,
    create_topics,
    kafka_settings,
    name,
    running_daemon,
    wait_until,
)

FRESH = {"id": "fresh", "attempts": 1, "target": {"kind": "memory", "name": "accepting"},
         "correlation": {"request": "{data.orderId}", "response": "{value.orderId}"}}


async def test_a_response_for_a_queue_created_a_second_ago_is_applied(
        db_url: str, kafka_bootstrap: str) -> None:
    topic = name("responses")
    await create_topics(kafka_bootstrap, topic)
    settings = kafka_settings(db_url, kafka_bootstrap, group=name("hipq"),
                              response_topics=[topic], queues=[])
    target = MemoryTarget()  # accepts: the outcome comes back on Kafka
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        async with running_daemon(settings, memory_targets={"accepting": target}) as daemon:
            await consumer_joined(daemon)
            consumer = daemon.kafka_consumer
            assert consumer is not None

            async def consumed() -> bool:
                return consumer.stats.consumed >= 1

            # an answer for nobody: the consumer reads the (empty) templates now
            await producer.send_and_wait(topic, json.dumps({"status": "succeeded"}).encode(),
                                         key=b"nobody")
            await wait_until(consumed, within=10, what="a first poll")
            await daemon.service.create_queue(QueueConfig.model_validate(FRESH))
            await daemon.service.enqueue("fresh", "o-1",
                                         EnqueueRequest(data={"orderId": "o-1"}))

            async def launched() -> bool:
                return bool(target.launched)

            await wait_until(launched, within=5, what="the launch")
            await producer.send_and_wait(topic, json.dumps(
                {"orderId": "o-1", "status": "succeeded", "result": 1}).encode())

            async def applied() -> bool:
                job, _ = await daemon.service.get_job("fresh", "o-1")
                return job.status == "succeeded"

            await wait_until(applied, within=4,
                             what="the response applied before the 5 s template refresh")
            assert consumer.stats.malformed == 0
    finally:
        await producer.stop()



"""The response consumer's fetch pace (issue 28): the broker may hold a fetch that
finds nothing for ``kafka.fetch_max_wait_busy_ms`` while responses flow and for
``kafka.fetch_max_wait_ms`` once none came for 2 s (Tansu holds a waiting fetch for
its whole wait, which added up to 500 ms to every response's way in)."""

from __future__ import annotations

import json

import pytest
from aiokafka import AIOKafkaProducer

from hipq.config import KafkaConfig
from hipq.responses.kafka_consumer import BUSY_SECONDS, FetchPace
from tests.kafka.conftest import (
    consumer_joined,
    create_topics,
    inbox_rows,
    kafka_settings,
    name,
    running_daemon,
    wait_until,
)


class _Fetcher:
    _fetch_max_wait_ms = 500


class _Consumer:
    def __init__(self) -> None:
        self._fetcher = _Fetcher()


def _pace(**settings: object) -> tuple[FetchPace, _Consumer, list[float]]:
    now = [100.0]
    pace = FetchPace(KafkaConfig(bootstrap_servers="127.0.0.1:1", **settings),  # type: ignore[arg-type]
                     lambda: now[0])
    consumer = _Consumer()
    pace.attach(consumer)  # type: ignore[arg-type]
    return pace, consumer, now


def test_short_waits_while_responses_flow_long_ones_once_quiet() -> None:
    pace, consumer, now = _pace()
    assert consumer._fetcher._fetch_max_wait_ms == 10  # started busy
    now[0] += BUSY_SECONDS / 2
    pace.quiet()
    assert consumer._fetcher._fetch_max_wait_ms == 10  # quiet for a moment only
    pace.busy()
    now[0] += BUSY_SECONDS - 0.1
    pace.quiet()
    assert consumer._fetcher._fetch_max_wait_ms == 10
    now[0] += 0.2
    pace.quiet()
    assert consumer._fetcher._fetch_max_wait_ms == 500
    pace.busy()
    assert consumer._fetcher._fetch_max_wait_ms == 10


def test_a_wait_in_client_options_is_left_alone() -> None:
    _, consumer, _ = _pace(client_options={"fetch_max_wait_ms": 50})
    assert consumer._fetcher._fetch_max_wait_ms == 500  # the stand-in's, untouched


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_the_daemons_consumer_is_paced(kafka_bootstrap: str, db_url: str) -> None:
    """aiokafka's consumer still reads its wait where the pace sets it."""
    topic = name("responses")
    await create_topics(kafka_bootstrap, topic, partitions=1)
    settings = kafka_settings(db_url, kafka_bootstrap, group=name("hipq"),
                              response_topics=[topic], queues=[])
    async with running_daemon(settings) as daemon:
        await consumer_joined(daemon)
        consumer = daemon.kafka_consumer
        assert consumer is not None
        assert consumer.pace._fetcher is not None, "aiokafka's fetcher has moved"
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, key=b"paced-1",
                                         value=json.dumps({"attempt": 1}).encode())
        finally:
            await producer.stop()
        store = daemon.store

        async def arrived() -> bool:
            return bool(await inbox_rows(store, "paced-1"))

        await wait_until(arrived, within=20, what="the response")
        assert consumer.pace.current == 10
        assert consumer.pace._fetcher._fetch_max_wait_ms == 10

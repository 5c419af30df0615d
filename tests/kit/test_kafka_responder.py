"""hipq.downstream.KafkaResponder end to end: a real ``hipq run`` (SQLite and
PostgreSQL) launches jobs to a request topic on the real broker; the responder
answers on the response topic with the correlation header; the jobs finish."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from hipq.client import AsyncClient
from hipq.downstream import Fail, KafkaResponder, Launch
from hipq.downstream import kafka_responder as kafka_kit
from tests.api.conftest import ADMIN
from tests.kafka.conftest import SESSION, OwnBroker, create_topics, name
from tests.kit.conftest import HipqRun, wait_job

pytestmark = pytest.mark.slow


async def test_kafka_responder_round_trip(hipq_run: HipqRun, kafka_bootstrap: str) -> None:
    requests, responses = name("kit-req"), name("kit-resp")
    await create_topics(kafka_bootstrap, requests, responses)
    seen: list[tuple[str, int]] = []

    async def handle(launch: Launch) -> dict[str, Any]:
        seen.append((launch.id, launch.attempt))
        if launch.data["n"] == 3:
            raise Fail("three is not allowed")
        if launch.data["n"] == 4 and launch.attempt == 1:
            raise ConnectionError("flaky partner")
        return {"square": launch.data["n"] ** 2}

    responder = KafkaResponder(kafka_bootstrap, requests, responses, handle,
                               group_id=name("kit-responder"), consumer_options=SESSION)
    ready = asyncio.Event()
    running = asyncio.create_task(responder.run(ready=ready))
    url = await hipq_run(kafka={"bootstrap_servers": kafka_bootstrap,
                                "group_id": name("kit-hipq"), "response_topics": [responses],
                                **SESSION})
    try:
        await asyncio.wait_for(ready.wait(), 30)
        async with AsyncClient(url, token=ADMIN) as hipq:
            await hipq.create_queue("kq", attempts=3, target={"kind": "kafka", "topic": requests},
                                    retry={"strategy": "fixed", "delay_seconds": 0.05})
            results = await hipq.enqueue_many("kq", [{"id": f"k{n}", "data": {"n": n}}
                                                     for n in range(10)])
            assert {r.status for r in results} == {"created"}
            jobs = {n: await wait_job(hipq, "kq", f"k{n}", "succeeded", "failed", within=60)
                    for n in range(10)}
    finally:
        responder.stop()
        await asyncio.wait_for(running, 30)
    assert {n: j.status for n, j in jobs.items()} == {
        n: "failed" if n == 3 else "succeeded" for n in range(10)}
    assert jobs[2].result == {"square": 4}
    assert (jobs[3].attempt, "three is not allowed" in str(jobs[3].error)) == (1, True)
    assert (jobs[4].attempt, jobs[4].result) == (2, {"square": 16})
    assert responder.handled == 11
    assert sorted(seen) == sorted([(f"k{n}", 1) for n in range(10)] + [("k4", 2)])


async def test_kafka_responder_without_header_matched_by_template(
        hipq_run: HipqRun, kafka_bootstrap: str) -> None:
    """``correlation_header=False``: the responses carry no header; the queue matches
    them by its response template over the handler's result."""
    requests, responses = name("kit-req"), name("kit-resp")
    await create_topics(kafka_bootstrap, requests, responses)

    async def handle(launch: Launch) -> dict[str, Any]:
        return {"orderId": launch.data["orderId"], "version": launch.data["version"]}

    responder = KafkaResponder(kafka_bootstrap, requests, responses, handle,
                               group_id=name("kit-responder"), consumer_options=SESSION,
                               correlation_header=False)
    ready = asyncio.Event()
    running = asyncio.create_task(responder.run(ready=ready))
    url = await hipq_run(kafka={"bootstrap_servers": kafka_bootstrap,
                                "group_id": name("kit-hipq"), "response_topics": [responses],
                                **SESSION})
    try:
        await asyncio.wait_for(ready.wait(), 30)
        async with AsyncClient(url, token=ADMIN) as hipq:
            await hipq.create_queue(
                "kt", target={"kind": "kafka", "topic": requests},
                correlation={"request": "{data.orderId}:{data.version}",
                             "response": "{value.result.orderId}:{value.result.version}"})
            await hipq.enqueue_many("kt", [{"id": f"t{n}", "data": {"orderId": f"o{n}",
                                                                     "version": 2}}
                                           for n in range(5)])
            jobs = [await wait_job(hipq, "kt", f"t{n}", "succeeded", "failed", within=60)
                    for n in range(5)]
    finally:
        responder.stop()
        await asyncio.wait_for(running, 30)
    assert [(j.status, j.correlation_key) for j in jobs] == [
        ("succeeded", f"o{n}:2") for n in range(5)]


async def test_kafka_responder_answers_again_after_a_broker_restart() -> None:
    """The broker loses its topics, offsets and groups on a restart (Tansu keeps them in
    memory): the responder reconnects, reads the new log from its start and answers
    the launches that come after; nothing waits on a commit that never finishes."""
    broker = OwnBroker()
    await broker.start()
    requests, responses = name("kit-req"), name("kit-resp")
    responder = KafkaResponder(broker.bootstrap, requests, responses, _echo,
                               group_id=name("kit-responder"), consumer_options=SESSION)
    running: asyncio.Task[None] | None = None
    try:
        await create_topics(broker.bootstrap, requests, responses)
        ready = asyncio.Event()
        running = asyncio.create_task(responder.run(ready=ready))
        await asyncio.wait_for(ready.wait(), 30)
        assert await _round(broker.bootstrap, requests, responses, "a", 5) == 5
        await broker.stop()
        await broker.start()  # the topics come back when first produced to (auto-created)
        assert await _round(broker.bootstrap, requests, responses, "b", 5) == 5
    finally:
        responder.stop()
        if running is not None:
            await asyncio.wait_for(running, 30)
        await broker.stop()


async def _echo(launch: Launch) -> int:
    return int(launch.data["n"])


async def _round(bootstrap: str, requests: str, responses: str, prefix: str,
                 launches: int) -> int:
    """Produce ``launches`` launches and count the distinct answers to them (60 s)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(responses, bootstrap_servers=bootstrap,
                                group_id=name("kit-reader"), auto_offset_reset="earliest",
                                **SESSION)
    await producer.start()
    await consumer.start()
    try:
        for n in range(launches):
            key = f"{prefix}{n}".encode()
            await producer.send_and_wait(requests, json.dumps({
                "id": f"{prefix}{n}", "queue": "q", "data": {"n": n}, "attempt": 1,
                "max_attempts": 1, "correlation_key": key.decode()}).encode(),
                headers=[("Hipq-Correlation-Key", key)])
        seen: set[bytes] = set()
        deadline = asyncio.get_running_loop().time() + 60
        while len(seen) < launches and asyncio.get_running_loop().time() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                seen.update(v for r in records for k, v in r.headers
                            if k == "Hipq-Correlation-Key" and v.startswith(prefix.encode()))
        return len(seen)
    finally:
        await consumer.stop()
        await producer.stop()


async def test_a_commit_that_never_finishes_makes_the_responder_reconnect(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """aiokafka retries some commit errors for ever (a topic gone with a broker's
    data): the responder gives the commit ``COMMIT_SECONDS``, then connects again
    instead of never polling again."""
    monkeypatch.setattr(kafka_kit, "COMMIT_SECONDS", 0.05)
    monkeypatch.setattr(kafka_kit, "RECONNECT_SECONDS", 0.01)

    class StuckConsumer:
        async def commit(self, offsets: dict[Any, int]) -> None:
            await asyncio.Event().wait()

    responder = KafkaResponder("127.0.0.1:1", "req", "resp", _echo)
    with pytest.raises(ConnectionError, match="no offset commit"):
        await responder._commit(StuckConsumer(), {"tp": 1})

    connects = 0

    async def connected(ready: asyncio.Event | None) -> None:
        nonlocal connects
        connects += 1
        if connects < 3:
            raise ConnectionError("no offset commit within 0.05s")
        responder.stop()

    monkeypatch.setattr(responder, "_connected", connected)
    await asyncio.wait_for(responder.run(), 5)
    assert connects == 3

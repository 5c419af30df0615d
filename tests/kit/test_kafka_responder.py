"""hipq.downstream.KafkaResponder end to end: a real ``hipq run`` (SQLite and
PostgreSQL) launches jobs to a request topic on the real broker; the responder
answers on the response topic with the correlation header; the jobs finish."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hipq.client import AsyncClient
from hipq.downstream import Fail, KafkaResponder, Launch
from tests.api.conftest import ADMIN
from tests.kafka.conftest import SESSION, create_topics, name
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

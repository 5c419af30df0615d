"""The broker restarts mid-run (and stays down a while) under a running daemon.

Tansu keeps everything in memory, so requests and responses in flight are lost
with it, and so are topics, groups and offsets. Jobs caught in the outage end
through their timeouts and retries: launches that cannot be produced fail as
``transport`` (or ``timeout`` when handed over but unacknowledged) and are retried;
launches whose request or response was lost time out and are retried. Nothing is
stuck, nothing lost, and the daemon serves its API throughout.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp

from hipq.bodies import EnqueueRequest
from hipq.daemon import Daemon
from tests.kafka.conftest import (
    OwnBroker,
    Reply,
    Request,
    all_terminal,
    consumer_joined,
    create_topics,
    kafka_settings,
    name,
    responder,
    running_daemon,
    wait_until,
)

BEFORE, DURING = 40, 20


def echo(request: Request) -> list[Reply]:
    key = request.headers["Hipq-Correlation-Key"]
    return [Reply({"result": request.value["id"], "attempt": request.attempt},
                  headers={"Hipq-Correlation-Key": key})]


async def _healthy(daemon: Daemon) -> bool:
    async with (aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{daemon.api_port}/healthz",
                            timeout=aiohttp.ClientTimeout(total=5)) as answer):
        return answer.status == 200


async def test_broker_restart_mid_run(tmp_path: Path) -> None:
    broker = OwnBroker()
    await broker.start()
    try:
        await _run(broker, tmp_path)
    finally:
        await broker.stop()


async def _run(broker: OwnBroker, tmp_path: Path) -> None:
    requests_topic, responses_topic = name("requests"), name("responses")
    await create_topics(broker.bootstrap, requests_topic, responses_topic)
    queue = {"id": "work", "attempts": 50, "timeout_seconds": 3,
             "target": {"kind": "kafka", "topic": requests_topic},
             "retry": {"strategy": "fixed", "delay_seconds": 0.3}}
    settings = kafka_settings(f"sqlite+aiosqlite:///{tmp_path}/hipq.db", broker.bootstrap,
                              group=name("hipq"), response_topics=[responses_topic],
                              queues=[queue], api=True, delivery_timeout_seconds=1.5)
    async with (running_daemon(settings) as daemon,
                responder(broker.bootstrap, requests_topic, responses_topic, echo)):
        service, store = daemon.service, daemon.store
        assert service is not None
        assert store is not None
        await consumer_joined(daemon)
        for n in range(BEFORE):
            await service.enqueue("work", f"a{n}", EnqueueRequest(data={"n": n}))
        await wait_until(lambda: _succeeded(service, BEFORE // 2), within=20,
                         what="half of the first jobs to succeed")

        await broker.stop()
        for n in range(DURING):
            await service.enqueue("work", f"b{n}", EnqueueRequest(data={"n": n}))
        await wait_until(lambda: _failed_tries(service), within=20,
                         what="a launch to fail while the broker is down")
        assert await _healthy(daemon)

        await broker.start()
        await wait_until(lambda: all_terminal(store), within=60, what="every job to end")
        assert await _healthy(daemon)

        attempts = []
        for job_id in [f"a{n}" for n in range(BEFORE)] + [f"b{n}" for n in range(DURING)]:
            job, history = await service.get_job("work", job_id)
            assert job.status == "succeeded", (job_id, job.status, job.error)
            assert [a.attempt for a in history if a.outcome != "late_response"] == list(
                range(1, job.attempt + 1))
            attempts.append(job.attempt)
        assert max(attempts) > 1  # the outage cost some jobs a try or more


async def _succeeded(service: object, count: int) -> bool:
    from hipq.service import Hipq
    assert isinstance(service, Hipq)
    jobs = await service.list_archived(queue="work", status="succeeded", limit=1000)
    return len(jobs) >= count


async def _failed_tries(service: object) -> bool:
    from hipq.service import Hipq
    assert isinstance(service, Hipq)
    for n in range(DURING):
        _, history = await service.get_job("work", f"b{n}")
        if any(a.outcome in ("transport", "timeout") for a in history):
            return True
    return False

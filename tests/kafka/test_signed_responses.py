"""Signed Kafka responses (issue 46, finding 10b; docs/kafka.md, "Signed responses").

Any writer to a response topic could complete any running job: a reader of the
request topic sees each try's correlation key. With
``kafka.require_signed_responses: true`` a response must carry the
``Hipq-Signature`` header that hipq put on the try's launch (an HMAC of the key,
the attempt and the job's token with the signing key, apart from the callback
URL's); hipq.downstream's KafkaResponder copies it onto its response. An unsigned
response, a made-up or altered signature, another try's signature, or a signature
of an earlier job that held the same key is dropped (logged, counted as forged,
committed past) or stale: the job keeps running until a signed response comes. With
the setting off (the default) an unsigned response still completes its job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hipq.bodies import EnqueueRequest
from hipq.downstream import KafkaResponder, Launch
from hipq.service import Hipq
from tests.kafka.conftest import (
    SESSION,
    Reply,
    Request,
    Responder,
    captured,
    consumer_joined,
    create_topics,
    inbox_rows,
    kafka_settings,
    name,
    responder,
    running_daemon,
    wait_until,
)

SIGNATURE = "Hipq-Signature"
KEY = "Hipq-Correlation-Key"
ORDERS = {"request": "{data.orderId}", "response": "{value.orderId}"}


def queues(topic: str) -> list[dict[str, Any]]:
    target = {"kind": "kafka", "topic": topic}
    return [{"id": "plain", "attempts": 1, "timeout_seconds": 60, "target": target},
            {"id": "orders", "attempts": 1, "timeout_seconds": 60, "target": target,
             "correlation": ORDERS}]


def _silent(request: Request) -> Sequence[Reply]:
    return []  # the test answers by hand


async def test_with_signed_responses_required_only_a_signed_response_completes_a_job(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    requests_topic, responses_topic = name("requests"), name("responses")
    await create_topics(kafka_bootstrap, requests_topic, responses_topic)
    settings = kafka_settings(f"sqlite+aiosqlite:///{tmp_path}/hipq.db", kafka_bootstrap,
                              group=name("hipq"), response_topics=[responses_topic],
                              queues=queues(requests_topic), require_signed_responses=True)
    with captured("hipq.responses.kafka_consumer") as logs:
        async with (running_daemon(settings) as daemon,
                    responder(kafka_bootstrap, requests_topic, responses_topic,
                              _silent) as reader):
            service, store, consumer = daemon.service, daemon.store, daemon.kafka_consumer
            assert service is not None
            assert store is not None
            assert consumer is not None
            await consumer_joined(daemon)
            for job_id in ("p1", "p2"):
                await service.enqueue("plain", job_id, EnqueueRequest(data={}))
            await service.enqueue("orders", "o1", EnqueueRequest(data={"orderId": "order-7"}))
            p1, p2, o1 = [await _launch(reader, job_id) for job_id in ("p1", "p2", "o1")]
            key, signed = p1.headers[KEY], p1.headers[SIGNATURE]
            attempt, token, mac = signed.split(".")
            assert (int(attempt), len(mac)) == (1, 64)
            assert signed != p2.headers[SIGNATURE]
            assert mac not in (p1.value.get("callback_url") or "")  # not the URL's sig

            # everything a writer without the launch can send, for p1's running try
            success = {"status": "succeeded", "attempt": 1, "result": "forged"}
            forged = [
                {},                                                   # unsigned
                {SIGNATURE: ""}, {SIGNATURE: "nonsense"},
                {SIGNATURE: f"{attempt}.{token}.{'0' * 64}"},          # made up
                {SIGNATURE: f"{attempt}.{token}.{mac[:-1]}{'0' if mac[-1] != '0' else '1'}"},
                {SIGNATURE: f"2.{token}.{mac}"},                       # altered attempt
                {SIGNATURE: f"{attempt}.{token}x.{mac}"},              # altered token
                {SIGNATURE: p2.headers[SIGNATURE]},                    # another try's
                {SIGNATURE: signed.upper()},
            ]
            for headers in forged:
                await reader.send(Reply(success, headers={KEY: key, **headers}))
            await reader.send(Reply({"orderId": "order-7", **success}))  # by the template
            await wait_until(lambda: _forged(consumer, len(forged) + 1), within=20,
                             what="every forged response read")
            assert await inbox_rows(store, key) == []
            assert await inbox_rows(store, "order-7") == []
            for queue, job_id in (("plain", "p1"), ("plain", "p2"), ("orders", "o1")):
                assert await _status(service, queue, job_id) == "running", job_id

            # the responder copies each launch's signature onto its response
            kit = KafkaResponder(kafka_bootstrap, requests_topic, responses_topic, _answer,
                                 group_id=name("kit-responder"), consumer_options=SESSION)
            running = asyncio.create_task(kit.run())
            try:
                for queue, job_id in (("plain", "p1"), ("plain", "p2"), ("orders", "o1")):
                    await wait_until(lambda q=queue, j=job_id: _done(service, q, j),
                                     within=30, what=f"{job_id} to finish")
            finally:
                kit.stop()
                await asyncio.wait_for(running, 30)
            for queue, job_id in (("plain", "p1"), ("plain", "p2"), ("orders", "o1")):
                job, _ = await service.get_job(queue, job_id)
                assert job.status == "succeeded", job_id
                assert job.result["ok"] == job_id

            # a later job holding the same key: o1's signed response does not finish it
            await service.enqueue("orders", "o2", EnqueueRequest(data={"orderId": "order-7"}))
            o2 = await _launch(reader, "o2")
            assert o2.headers[KEY] == o1.headers[KEY] == "order-7"
            assert o2.headers[SIGNATURE] != o1.headers[SIGNATURE]
            await reader.send(Reply({"orderId": "order-7", **success},
                                    headers={KEY: "order-7", SIGNATURE: o1.headers[SIGNATURE]}))
            await wait_until(lambda: _outcomes(store, "order-7", 2), within=20,
                             what="o1's replayed response read and judged")
            assert sorted(r.outcome for r in await inbox_rows(store, "order-7")) == [
                "applied", "stale"]
            assert await _status(service, "orders", "o2") == "running"
            assert consumer.stats.forged == len(forged) + 1
            assert consumer.stats.errors == 0
    dropped = [r for r in logs if getattr(r, "action", "") == "kafka_response_forged"]
    assert len(dropped) == len(forged) + 1
    for record in dropped:
        text = record.getMessage()
        assert f"{responses_topic}/" in text
        assert "offset" in text
        assert mac not in text
        assert token not in text


async def test_without_the_setting_an_unsigned_response_still_completes_its_job(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    requests_topic, responses_topic = name("requests"), name("responses")
    await create_topics(kafka_bootstrap, requests_topic, responses_topic)
    settings = kafka_settings(f"sqlite+aiosqlite:///{tmp_path}/hipq.db", kafka_bootstrap,
                              group=name("hipq"), response_topics=[responses_topic],
                              queues=queues(requests_topic))
    assert settings.kafka is not None
    assert settings.kafka.require_signed_responses is False
    async with (running_daemon(settings) as daemon,
                responder(kafka_bootstrap, requests_topic, responses_topic, _silent) as reader):
        service, consumer = daemon.service, daemon.kafka_consumer
        assert service is not None
        assert consumer is not None
        await consumer_joined(daemon)
        await service.enqueue("plain", "p1", EnqueueRequest(data={}))
        await service.enqueue("orders", "o1", EnqueueRequest(data={"orderId": "order-8"}))
        p1 = await _launch(reader, "p1")
        await _launch(reader, "o1")
        await reader.send(Reply({"status": "succeeded", "result": "unsigned"},
                                headers={KEY: p1.headers[KEY]}))
        await reader.send(Reply({"orderId": "order-8", "result": "unsigned"}))
        for queue, job_id in (("plain", "p1"), ("orders", "o1")):
            await wait_until(lambda q=queue, j=job_id: _done(service, q, j), within=20,
                             what=f"{job_id} to finish")
            job, _ = await service.get_job(queue, job_id)
            assert (job.status, job.result) == ("succeeded", "unsigned"), job_id
        assert consumer.stats.forged == 0


async def _answer(launch: Launch) -> dict[str, Any]:
    return {"orderId": launch.data.get("orderId"), "ok": launch.id}


async def _launch(reader: Responder, job_id: str) -> Request:
    await wait_until(lambda: _seen(reader, job_id), within=20, what=f"{job_id}'s launch")
    return reader.seen(job_id)[-1]


async def _seen(reader: Responder, job_id: str) -> bool:
    return bool(reader.seen(job_id))


async def _forged(consumer: Any, count: int) -> bool:
    return int(getattr(consumer.stats, "forged", 0)) >= count


async def _status(service: Hipq, queue: str, job_id: str) -> str:
    job, _ = await service.get_job(queue, job_id)
    return str(job.status)


async def _done(service: Hipq, queue: str, job_id: str) -> bool:
    job, _ = await service.get_job(queue, job_id)
    return bool(job.status.terminal)


async def _outcomes(store: Any, key: str, count: int) -> bool:
    rows = await inbox_rows(store, key)
    return len(rows) >= count and all(r.outcome is not None for r in rows)

"""Jobs launched as Kafka messages, finished by Kafka responses (against Tansu).

A responder consumes the request topic and answers on a 4-partition response topic:
out of order (each poll's replies are shuffled), on random partitions, some twice,
some failing (retryable or not), some stale, some for unknown keys, some malformed,
one before its job exists and one after its job timed out. Responses are matched by
a template over business fields (``{value.orderId}:{value.version}``), not by the
default key; a second queue checks the default per-attempt key and a ``key``
template for the message key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hipq.bodies import EnqueueRequest
from tests.kafka.conftest import (
    Reply,
    Request,
    all_terminal,
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

TEMPLATES = {"request": "{data.orderId}:{data.version}",
             "response": "{value.orderId}:{value.version}"}
RETRY = {"strategy": "fixed", "delay_seconds": 0.2}


def orders_policy(request: Request) -> list[Reply]:
    """How the downstream answers an ``orders`` request, by the order id's prefix."""
    data = request.data
    order, kind = data["orderId"], data["orderId"].split("-")[0]
    body = {"orderId": order, "version": data["version"]}
    ok = Reply({**body, "status": "succeeded", "result": {"shipped": order}}, key=order)
    if kind == "ok":
        return [ok]
    if kind == "dup":
        return [ok, ok]
    if kind == "retry":
        if request.attempt == 1:
            return [Reply({**body, "status": "failed", "error": {"detail": "busy"}}, key=order)]
        return [ok]
    if kind == "fail":
        return [Reply({**body, "status": "failed", "retryable": False,
                       "error": {"detail": "no such order"}}, key=order)]
    if kind == "stale":
        if request.attempt == 1:
            return [Reply({**body, "status": "failed", "error": "busy"}, key=order)]
        # the success of the old try arrives after the new try started: stale
        return [Reply({**body, "status": "succeeded", "attempt": 1}, key=order),
                Reply({**body, "status": "failed", "retryable": False, "attempt": 2,
                       "error": "gone"}, key=order)]
    return []  # early / late: answered by the test itself


def plain_policy(request: Request) -> list[Reply]:
    """The ``plain`` queue: default per-attempt keys, echoed as header or message key."""
    key = request.headers["Hipq-Correlation-Key"]
    if request.data["n"] % 2:
        return [Reply({"status": "succeeded", "result": request.data["n"]},
                      headers={"Hipq-Correlation-Key": key})]
    return [Reply({"result": request.data["n"]}, key=key)]


def policy(request: Request) -> list[Reply]:
    if request.value["queue"] == "plain":
        return plain_policy(request)
    return orders_policy(request)


def queues(request_topic: str) -> list[dict[str, Any]]:
    target = {"kind": "kafka", "topic": request_topic}
    return [
        {"id": "orders", "attempts": 3, "timeout_seconds": 30, "target": target,
         "correlation": TEMPLATES, "retry": RETRY},
        {"id": "orders-late", "attempts": 1, "timeout_seconds": 1.0, "target": target,
         "correlation": TEMPLATES, "retry": RETRY},
        {"id": "plain", "attempts": 2, "timeout_seconds": 30, "retry": RETRY,
         "target": {**target, "key": "{data.customer}"}},
    ]


EXPECTED = {  # job -> (status, attempts)
    **{f"ok-{i}": ("succeeded", 1) for i in range(12)},
    **{f"dup-{i}": ("succeeded", 1) for i in range(3)},
    "retry-1": ("succeeded", 2), "retry-2": ("succeeded", 2),
    "fail-1": ("failed", 1),
    "stale-1": ("failed", 2),
    "early-1": ("succeeded", 1),
}


async def test_kafka_round_trip_edge_cases(kafka_bootstrap: str, tmp_path: Path) -> None:
    requests_topic, responses_topic = name("requests"), name("responses")
    await create_topics(kafka_bootstrap, requests_topic, responses_topic)
    settings = kafka_settings(f"sqlite+aiosqlite:///{tmp_path}/hipq.db", kafka_bootstrap,
                              group=name("hipq"), response_topics=[responses_topic],
                              queues=queues(requests_topic), buffer_seconds=10.0)
    with captured("hipq.responses.kafka_consumer") as logs:
        async with (running_daemon(settings) as daemon,
                    responder(kafka_bootstrap, requests_topic, responses_topic,
                              policy) as downstream):
            service, store, consumer = daemon.service, daemon.store, daemon.kafka_consumer
            assert service is not None
            assert store is not None
            assert consumer is not None
            await consumer_joined(daemon)

            # early: the response is in the inbox before its job even exists
            await downstream.send(Reply({"orderId": "early-1", "version": 1,
                                         "result": "early"}, key="early-1"))
            await wait_until(lambda: _has_inbox(store, "early-1:1"), within=10,
                             what="the early response in the inbox")
            # malformed: not JSON, not an object, no key at all, invalid status
            for bad in (Reply(b"{not json", key="x"), Reply(b"[1, 2]", key="x"),
                        Reply({"status": "succeeded"}),
                        Reply({"orderId": "ok-0", "version": 1, "status": "exploded"})):
                await downstream.send(bad)
            # unknown keys: buffered, then unmatched
            for ghost in ("ghost-1", "ghost-2"):
                await downstream.send(Reply({"orderId": ghost, "version": 1}, key=ghost))

            for job_id in EXPECTED:
                await service.enqueue("orders", job_id, EnqueueRequest(
                    data={"orderId": job_id, "version": 1}))
            for n in range(6):
                await service.enqueue("plain", f"p-{n}", EnqueueRequest(
                    data={"n": n, "customer": f"c{n % 2}"}))
            await service.enqueue("orders-late", "late-1", EnqueueRequest(
                data={"orderId": "late-1", "version": 1}))

            await wait_until(lambda: _finished(service, "orders-late", "late-1"), within=15,
                             what="late-1 to time out")
            # late: the answer comes after the job failed with a timeout
            await downstream.send(Reply({"orderId": "late-1", "version": 1}, key="late-1"))

            await wait_until(lambda: all_terminal(store), within=30,
                             what="every job to end")
            await wait_until(lambda: _counts_reach(service, unmatched=2, late=1), within=40,
                             what="ghost responses unmatched and the late one recorded")

            for job_id, (status, attempts) in EXPECTED.items():
                job, history = await service.get_job("orders", job_id)
                assert (job.status, job.attempt) == (status, attempts), job_id
                assert [a.attempt for a in history if a.outcome != "late_response"] == list(
                    range(1, attempts + 1)), job_id
            for n in range(6):
                job, _ = await service.get_job("plain", f"p-{n}")
                assert (job.status, job.attempt, job.result) == ("succeeded", 1, n)

            late, late_history = await service.get_job("orders-late", "late-1")
            assert late.status == "failed"
            assert (late.error or {}).get("kind") == "timeout"
            assert sorted(a.outcome for a in late_history) == ["late_response", "timeout"]

            ok, _ = await service.get_job("orders", "ok-3")
            assert ok.result == {"shipped": "ok-3"}
            early, _ = await service.get_job("orders", "early-1")
            assert early.result == "early"
            assert not [r for r in downstream.seen("early-1") if r.attempt > 1]

            # duplicates: two rows in the inbox, one applied
            for i in range(3):
                outcomes = sorted(r.outcome for r in await inbox_rows(store, f"dup-{i}:1"))
                assert outcomes in (["applied", "duplicate"], ["applied", "late"]), outcomes
            # the old try's success is never applied: "stale" when it is read while
            # the second try runs, "late" when the second try's answer (sent right
            # after it) ended the job in the same pass
            stale = [r.outcome for r in await inbox_rows(store, "stale-1:1")]
            assert "stale" in stale or sorted(stale) == ["applied", "applied", "late"], stale
            stale_job, _ = await service.get_job("orders", "stale-1")
            assert "gone" in str(stale_job.error)

            assert consumer.stats.malformed == 4
            assert consumer.stats.errors == 0

            _check_requests(downstream.requests)
    bad = [r for r in logs if getattr(r, "action", "") == "kafka_response_malformed"]
    assert len(bad) == 4
    for record in bad:
        assert f"{responses_topic}/" in record.getMessage()
        assert "offset" in record.getMessage()


def _check_requests(requests: list[Request]) -> None:
    first = next(r for r in requests if r.value["id"] == "ok-1")
    assert first.value == {"id": "ok-1", "queue": "orders",
                           "data": {"orderId": "ok-1", "version": 1}, "attempt": 1,
                           "max_attempts": 3, "correlation_key": "ok-1:1",
                           "callback_url": first.value["callback_url"]}
    assert first.key == "ok-1:1"
    assert first.headers["Hipq-Correlation-Key"] == "ok-1:1"
    plain = [r for r in requests if r.value["queue"] == "plain"]
    assert len(plain) == 6
    for r in plain:
        assert r.key == r.value["data"]["customer"]  # the key template
        assert r.headers["Hipq-Correlation-Key"] == r.value["correlation_key"]
    by_customer = {r.key: {x.partition for x in plain if x.key == r.key} for r in plain}
    assert all(len(parts) == 1 for parts in by_customer.values())


async def _has_inbox(store: Any, key: str) -> bool:
    return bool(await inbox_rows(store, key))


async def _finished(service: Any, queue: str, job_id: str) -> bool:
    job, _ = await service.get_job(queue, job_id)
    return bool(job.status.terminal)


async def _counts_reach(service: Any, **minimum: int) -> bool:
    counts = await service.response_counts()
    return all(counts.get(k, 0) >= v for k, v in minimum.items())

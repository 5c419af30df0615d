"""A traced job's tries on a real broker (docs/traces.md): each message carries the
job's trace id in a ``traceparent`` header (and its ``tracestate``), with a new span
id per try; an untraced job's messages carry none. SQLite and PostgreSQL."""

from __future__ import annotations

from hipq.bodies import EnqueueRequest
from hipq.service import Hipq
from tests.kafka.conftest import (
    Reply,
    Request,
    consumer_joined,
    create_topics,
    kafka_settings,
    name,
    responder,
    running_daemon,
    wait_until,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def fail_first(request: Request) -> list[Reply]:
    key = request.headers["Hipq-Correlation-Key"]
    status = "failed" if request.attempt == 1 else "succeeded"
    return [Reply({"status": status}, headers={"Hipq-Correlation-Key": key})]


async def _ended(service: Hipq, *ids: str) -> bool:
    for job_id in ids:
        job, _ = await service.get_job("work", job_id)
        if not job.status.terminal:
            return False
    return True


async def test_each_try_carries_the_trace_in_a_kafka_header(
        db_url: str, kafka_bootstrap: str) -> None:
    requests_topic, responses_topic = name("requests"), name("responses")
    await create_topics(kafka_bootstrap, requests_topic, responses_topic)
    queue = {"id": "work", "attempts": 3, "target": {"kind": "kafka", "topic": requests_topic},
             "retry": {"strategy": "fixed", "delay_seconds": 0.1}}
    settings = kafka_settings(db_url, kafka_bootstrap, group=name("hipq"),
                              response_topics=[responses_topic], queues=[queue])
    async with (running_daemon(settings) as daemon,
                responder(kafka_bootstrap, requests_topic, responses_topic, fail_first) as down):
        service = daemon.service
        assert service is not None
        await consumer_joined(daemon)
        await service.enqueue("work", "traced", EnqueueRequest(tracestate="k=v",
                                                               traceparent=PARENT))
        await service.enqueue("work", "plain", EnqueueRequest())
        await wait_until(lambda: _ended(service, "traced", "plain"), within=30,
                         what="both jobs to end")
        job, _ = await service.get_job("work", "traced")
        assert (job.status, job.to_json()["trace_id"]) == ("succeeded", TRACE_ID)
        sent = [r.headers for r in down.seen("traced")]
        assert len(sent) == 2
        assert [h["traceparent"][3:35] for h in sent] == [TRACE_ID, TRACE_ID]
        span_ids = {h["traceparent"][36:52] for h in sent}
        assert len(span_ids) == 2
        assert "00f067aa0ba902b7" not in span_ids
        assert [h["tracestate"] for h in sent] == ["k=v", "k=v"]
        assert all("traceparent" not in r.headers for r in down.seen("plain"))

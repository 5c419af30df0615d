"""Traces (docs/traces.md) through a live daemon on SQLite and PostgreSQL: the
enqueue request's W3C context travels with the job, a new span id per try on the HTTP
target's ``traceparent`` (a real downstream on 127.0.0.1 records it), ``trace_id`` on
the job JSON (live and archived) and on the failure logs; batches, bad contexts, the
intake (docs/from-your-database.md) and the OpenTelemetry spans (the SDK's in-memory exporter)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hipq import tracing
from hipq.otel import OtelTracer
from hipq.sql import enqueue as sql_enqueue
from hipq.store import open_store
from tests.api.conftest import Downstream, LiveFactory, http_queue

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
PARENT = f"00-{TRACE_ID}-{SPAN_ID}-01"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _fail_first_try() -> Any:
    async def reply(body: dict[str, Any]) -> tuple[int, Any]:
        return (500, "busy") if body["attempt"] == 1 else (200, {"ok": True})
    return reply


async def test_each_try_sends_the_trace_with_a_new_span_id(
        live: LiveFactory, downstream: Downstream) -> None:
    api = (await live()).api
    downstream.reply = _fail_first_try()
    queue = http_queue("t", downstream.url, target={"mode": "sync"})
    assert (await api.call("POST", "/v1/jobs", queue))[0] == 201
    status, body = await api.call("PUT", "/v1/jobs/t/one", {"data": {}},
                                  headers={"traceparent": PARENT, "tracestate": "k=v"})
    assert status == 201, body
    assert body["trace_id"] == TRACE_ID
    job = await api.wait_job("t", "one", "succeeded")
    assert job["trace_id"] == TRACE_ID  # archived: the context moved with the job
    sent = [h["traceparent"] for h in downstream.headers]
    assert len(sent) == 2
    spans = [tracing.parse_traceparent(t) for t in sent]
    assert [s[3:35] for s in spans if s] == [TRACE_ID, TRACE_ID]
    span_ids = {t[36:52] for t in sent}
    assert len(span_ids) == 2
    assert SPAN_ID not in span_ids
    assert all(t.endswith("-01") for t in sent)
    assert [h["tracestate"] for h in downstream.headers] == ["k=v", "k=v"]


async def test_a_job_without_a_trace_sends_no_traceparent(
        live: LiveFactory, downstream: Downstream) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", http_queue("t", downstream.url)))[0] == 201
    status, body = await api.call("PUT", "/v1/jobs/t/plain", {"data": {}})
    assert (status, body["trace_id"]) == (201, None)
    await downstream.wait_for(1)
    assert "traceparent" not in downstream.headers[0]


async def test_a_bad_header_is_ignored_and_a_bad_field_refused(
        live: LiveFactory, downstream: Downstream) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", http_queue("t", downstream.url)))[0] == 201
    status, body = await api.call("PUT", "/v1/jobs/t/h", {"data": {}},
                                  headers={"traceparent": "00-not-a-trace-01"})
    assert (status, body["trace_id"]) == (201, None)
    status, body = await api.call("PUT", "/v1/jobs/t/f", {"traceparent": "00-not-a-trace-01"})
    assert status == 422, body
    assert "traceparent" in str(body["error"])
    status, body = await api.call("PUT", "/v1/jobs/t/g", {"traceparent": PARENT,
                                                           "tracestate": "a=\u00e9"})
    assert status == 422, body
    assert (await api.call("GET", "/v1/jobs/t/f"))[0] == 404


async def test_the_body_field_wins_and_a_repeat_with_another_trace_is_the_same_job(
        live: LiveFactory, downstream: Downstream) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", http_queue("t", downstream.url)))[0] == 201
    status, body = await api.call("PUT", "/v1/jobs/t/own", {"traceparent": OTHER},
                                  headers={"traceparent": PARENT})
    assert (status, body["trace_id"]) == (201, OTHER[3:35])
    status, body = await api.call("PUT", "/v1/jobs/t/own", {}, headers={"traceparent": PARENT})
    assert (status, body["trace_id"]) == (200, OTHER[3:35])  # the stored one stays


async def test_batch_items_inherit_the_header_unless_they_have_their_own(
        live: LiveFactory, downstream: Downstream) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", http_queue("t", downstream.url)))[0] == 201
    status, body = await api.call("POST", "/v1/jobs/t/batch", {"jobs": [
        {"id": "a"}, {"id": "b", "traceparent": OTHER}, {"id": "c", "traceparent": "bad"}]},
        headers={"traceparent": PARENT})
    assert status == 200, body
    assert [j["status"] for j in body["jobs"]] == ["created", "created", "invalid"]
    assert "traceparent" in body["jobs"][2]["error"]
    assert (await api.job("t", "a"))["trace_id"] == TRACE_ID
    assert (await api.job("t", "b"))["trace_id"] == OTHER[3:35]
    await downstream.wait_for(2)
    by_id = {b["id"]: h for b, h in zip(downstream.received, downstream.headers, strict=True)}
    assert by_id["a"]["traceparent"][3:35] == TRACE_ID
    assert by_id["b"]["traceparent"][3:35] == OTHER[3:35]


async def test_failure_logs_carry_the_trace_id(
        live: LiveFactory, downstream: Downstream, caplog: pytest.LogCaptureFixture) -> None:
    api = (await live()).api
    downstream.reply = _fail_first_try()
    queue = http_queue("t", downstream.url, target={"mode": "sync"})
    assert (await api.call("POST", "/v1/jobs", queue))[0] == 201
    with caplog.at_level(logging.INFO, logger="hipq.jobs"):
        await api.call("PUT", "/v1/jobs/t/one", {}, headers={"traceparent": PARENT})
        await api.wait_job("t", "one", "succeeded")
    (line,) = [r for r in caplog.records if getattr(r, "action", None) == "try_failed"]
    assert line.trace_id == TRACE_ID  # type: ignore[attr-defined]
    assert f"(trace {TRACE_ID})" in line.getMessage()


async def test_an_intake_row_may_carry_a_traceparent(
        live: LiveFactory, downstream: Downstream, db_url: str) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", http_queue("t", downstream.url)))[0] == 201
    store = await open_store(db_url)
    try:
        async with store.engine.begin() as conn:  # type: ignore[attr-defined]
            await sql_enqueue(conn, "t", "from-sql", {"n": 1}, traceparent=PARENT)
            await sql_enqueue(conn, "t", "bad-sql", {"n": 2}, traceparent="00-bad")
    finally:
        await store.close()
    await downstream.wait_for(1)
    assert downstream.headers[0]["traceparent"][3:35] == TRACE_ID
    assert (await api.job("t", "from-sql"))["trace_id"] == TRACE_ID
    status, body = await api.call("GET", "/v1/intake?status=rejected")
    assert status == 200, body
    (rejected,) = body["rows"]
    assert "traceparent" in rejected["error"]


async def test_the_trace_survives_a_restart(
        live: LiveFactory, downstream: Downstream) -> None:
    first = await live()
    api = first.api
    queue = http_queue("t", downstream.url, paused=True)
    assert (await api.call("POST", "/v1/jobs", queue))[0] == 201
    await api.call("PUT", "/v1/jobs/t/kept", {}, headers={"traceparent": PARENT})
    first.stop.set()
    await first.task
    api = (await live()).api  # another daemon on the same database
    assert (await api.job("t", "kept"))["trace_id"] == TRACE_ID
    assert (await api.call("POST", "/v1/jobs/t/resume"))[0] == 200
    await downstream.wait_for(1)
    assert downstream.headers[0]["traceparent"][3:35] == TRACE_ID


SEEN: list[tuple[str | None, str | None]] = []


def record_trace(job: Any) -> str:
    """A Python target: what the try's context is while it runs (a worker thread)."""
    SEEN.append((job.id, tracing.current_traceparent()))
    return "ok"


async def test_a_python_target_sees_the_tries_traceparent(live: LiveFactory) -> None:
    SEEN.clear()
    target = {"kind": "python", "function": "tests.api.test_traces:record_trace"}
    api = (await live(queues=[{"id": "py", "target": target}])).api
    await api.call("PUT", "/v1/jobs/py/traced", {"traceparent": PARENT})
    await api.call("PUT", "/v1/jobs/py/plain", {})
    await api.wait_job("py", "traced", "succeeded")
    await api.wait_job("py", "plain", "succeeded")
    seen = dict(SEEN)
    assert seen["plain"] is None
    traced = seen["traced"]
    assert traced is not None
    assert traced[3:35] == TRACE_ID
    assert traced[36:52] != SPAN_ID


# -- OpenTelemetry ----------------------------------------------------------------------


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    before = tracing.install(OtelTracer(provider))
    try:
        yield exporter
    finally:
        tracing.install(before)
        provider.shutdown()


def _named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return sorted((s for s in spans.get_finished_spans() if s.name == name),
                  key=lambda s: s.start_time or 0)


async def test_spans_enqueue_and_each_try_in_the_jobs_trace(
        live: LiveFactory, downstream: Downstream, spans: InMemorySpanExporter) -> None:
    api = (await live()).api
    downstream.reply = _fail_first_try()
    queue = http_queue("t", downstream.url, target={"mode": "sync"})
    assert (await api.call("POST", "/v1/jobs", queue))[0] == 201
    await api.call("PUT", "/v1/jobs/t/one", {"data": {}}, headers={"traceparent": PARENT})
    await api.wait_job("t", "one", "succeeded")
    (enqueue,) = _named(spans, "hipq enqueue")
    assert enqueue.context is not None
    assert enqueue.parent is not None
    assert (enqueue.context.trace_id, enqueue.parent.span_id) == (int(TRACE_ID, 16),
                                                                  int(SPAN_ID, 16))
    assert dict(enqueue.attributes or {}) == {"hipq.queue": "t", "hipq.job_id": "one",
                                              "hipq.outcome": "created"}
    for _ in range(250):  # the last try's span ends just after its tick persisted it
        tries = _named(spans, "hipq try")
        if len(tries) == 2:
            break
        await asyncio.sleep(0.02)  # polling, as Api.wait_job does: there is no event
    assert len(tries) == 2, tries
    sent = [h["traceparent"] for h in downstream.headers]
    for number, (span, header) in enumerate(zip(tries, sent, strict=True), start=1):
        assert span.context is not None
        assert span.parent is not None
        assert span.parent.span_id == enqueue.context.span_id  # tries hang off the enqueue
        assert f"{span.context.span_id:016x}" == header[36:52]  # the id the try sent
        assert f"{span.context.trace_id:032x}" == TRACE_ID
        attributes = dict(span.attributes or {})
        assert attributes["hipq.queue"] == "t"
        assert attributes["hipq.job_id"] == "one"
        assert attributes["hipq.attempt"] == number
    assert [dict(s.attributes or {})["hipq.outcome"] for s in tries] == ["http_status",
                                                                         "succeeded"]
    assert not tries[0].status.is_ok


async def test_a_batch_makes_one_enqueue_span_per_context(
        live: LiveFactory, downstream: Downstream, spans: InMemorySpanExporter) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", http_queue("t", downstream.url)))[0] == 201
    status, _ = await api.call("POST", "/v1/jobs/t/batch", {"jobs": [
        {"id": "a"}, {"id": "b"}, {"id": "c", "traceparent": OTHER}, {"id": "d"}]},
        headers={"traceparent": PARENT})
    assert status == 200
    enqueues = _named(spans, "hipq enqueue")
    by_trace = {f"{s.context.trace_id:032x}": dict(s.attributes or {})
                for s in enqueues if s.context is not None}
    assert by_trace == {TRACE_ID: {"hipq.queue": "t", "hipq.job_count": 3, "hipq.created": 3},
                        OTHER[3:35]: {"hipq.queue": "t", "hipq.job_id": "c",
                                      "hipq.outcome": "created"}}
    assert not spans.get_finished_spans() or all(s.name == "hipq enqueue" or (
        s.parent is not None) for s in spans.get_finished_spans())


async def test_the_dashboard_gets_the_trace_url_template(live: LiveFactory) -> None:
    template = "https://grafana.example/explore?traceId={trace_id}"
    api = (await live(dashboard={"trace_url": template})).api
    status, body = await api.call("GET", "/v1/whoami")
    assert (status, body["trace_url"]) == (200, template)
    status, script = await api.call("GET", "/dashboard/app.js")
    assert status == 200
    assert "trace_url" in script  # the job page links the trace id with it


async def test_without_a_trace_url_the_dashboard_gets_none(live: LiveFactory) -> None:
    api = (await live()).api
    status, body = await api.call("GET", "/v1/whoami")
    assert (status, body["trace_url"]) == (200, None)

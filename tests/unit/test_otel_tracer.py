"""The OpenTelemetry tracer's bookkeeping (hipq.otel, docs/traces.md), with the SDK's
in-memory exporter: a try span ends with its persisted outcome, not with a heartbeat;
open spans are bounded; shutdown ends what is left."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hipq import otel, tracing
from hipq.jobs import Job
from hipq.store import Change, ChangeKind

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def exported() -> Iterator[tuple[otel.OtelTracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield otel.OtelTracer(provider), exporter
    provider.shutdown()


def _job(job_id: str, attempt: int = 1) -> Job:
    return Job(id=job_id, queue="q", run_at=NOW, created_at=NOW, updated_at=NOW,
               attempt=attempt, trace=PARENT)


def _change(kind: ChangeKind, job_id: str, outcome: str | None) -> Change:
    return Change(kind=kind, queue="q", id=job_id, attempt=1, outcome=outcome, trace=PARENT)


def test_a_try_span_ends_with_its_outcome_not_with_a_heartbeat(
        exported: tuple[otel.OtelTracer, InMemorySpanExporter]) -> None:
    tracer, exporter = exported
    with tracer.launching(_job("a")):
        sent = tracing.current_traceparent()
    tracer.tries_ended([_change(ChangeKind.EXTEND, "a", None)])
    assert exporter.get_finished_spans() == ()
    tracer.tries_ended([_change(ChangeKind.REQUEUE, "a", "timeout")])
    (span,) = exporter.get_finished_spans()
    assert span.context is not None
    assert sent == f"00-{PARENT[3:35]}-{span.context.span_id:016x}-01"
    assert dict(span.attributes or {}) == {"hipq.queue": "q", "hipq.job_id": "a",
                                           "hipq.attempt": 1, "hipq.outcome": "timeout"}
    assert not span.status.is_ok
    tracer.tries_ended([_change(ChangeKind.ARCHIVE, "a", "succeeded")])  # unknown now
    assert len(exporter.get_finished_spans()) == 1


def test_open_spans_are_bounded_and_shutdown_ends_the_rest(
        exported: tuple[otel.OtelTracer, InMemorySpanExporter],
        monkeypatch: pytest.MonkeyPatch) -> None:
    tracer, exporter = exported
    monkeypatch.setattr(otel, "MAX_OPEN_SPANS", 2)
    for job_id in ("a", "b", "c"):
        with tracer.launching(_job(job_id)):
            pass
    (oldest,) = exporter.get_finished_spans()
    assert dict(oldest.attributes or {})["hipq.job_id"] == "a"
    assert dict(oldest.attributes or {})["hipq.outcome"] == otel.LEFT_OPEN
    tracer.close()
    outcomes = [dict(s.attributes or {})["hipq.outcome"] for s in exporter.get_finished_spans()]
    assert outcomes == [otel.LEFT_OPEN, otel.HANDED_OVER, otel.HANDED_OVER]

"""OpenTelemetry spans in the jobs' traces (docs/traces.md): ``hipq enqueue``
and, per try, ``hipq try`` from launch to outcome. Imported only when the SDK is
installed (``pip install hipq[otel]``) and asked for (:func:`hipq.tracing.wanted`);
the state model is :mod:`hipq.tracing`'s.

A ``hipq try`` span starts when the launch starts (the span is current while the
target sends, so a Python target's own spans are its children) and ends when the
tick that persisted the try's outcome has run (:meth:`OtelTracer.tries_ended`); the
span id is the one the try sends in its ``traceparent``. Open spans live in memory,
one per traced try this daemon launched (at most :data:`MAX_OPEN_SPANS`: a try of a
queue this daemon lost is ended by another daemon, so its span would stay open; the
oldest then end as ``unknown``); at shutdown the ones still open end with
``hipq.outcome`` ``handed_over`` (the next owner emits no span for them).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, SpanKind, StatusCode

from hipq import tracing

if TYPE_CHECKING:
    from hipq.jobs import Job
    from hipq.store.records import Change

log = logging.getLogger(__name__)

ENQUEUE_SPAN = "hipq enqueue"
TRY_SPAN = "hipq try"
HANDED_OVER = "handed_over"
LEFT_OPEN = "unknown"
# open try spans kept at most; past it the oldest end as "unknown" (a try whose queue
# this daemon lost ends elsewhere and never reaches tries_ended here)
MAX_OPEN_SPANS = 100_000
_EXPORTER_GROUP = "opentelemetry_traces_exporter"


def _parent(trace_text: str) -> otel_context.Context:
    """The OpenTelemetry context whose current span is the stored (remote) one."""
    traceparent, tracestate = tracing.split(trace_text)
    state = trace.TraceState.from_header([tracestate]) if tracestate else None
    remote = SpanContext(trace_id=int(traceparent[3:35], 16),
                         span_id=int(traceparent[36:52], 16), is_remote=True,
                         trace_flags=trace.TraceFlags(int(traceparent[53:55], 16)),
                         trace_state=state)
    return trace.set_span_in_context(NonRecordingSpan(remote))


def _span_ids(span: Span) -> tuple[str, str]:
    """(span id, flags) of ``span`` as a traceparent writes them."""
    ctx = span.get_span_context()
    return f"{ctx.span_id:016x}", f"{ctx.trace_flags:02x}"


class OtelTracer(tracing.Tracer):
    """Spans through an OpenTelemetry tracer provider (the global one by default)."""

    active = True

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self.provider = provider or trace.get_tracer_provider()
        self._tracer = self.provider.get_tracer("hipq")
        self._open: dict[tuple[str, str, int], Span] = {}  # (queue, id, attempt) -> its try

    @contextmanager
    def launching(self, job: Job) -> Iterator[None]:
        assert job.trace is not None
        span = self._tracer.start_span(TRY_SPAN, context=_parent(job.trace),
                                       kind=SpanKind.PRODUCER, attributes={
                                           "hipq.queue": job.queue, "hipq.job_id": job.id,
                                           "hipq.attempt": job.attempt})
        open_spans = self._open
        open_spans[(job.queue, job.id, job.attempt)] = span
        if len(open_spans) > MAX_OPEN_SPANS:
            oldest = open_spans.pop(next(iter(open_spans)))
            oldest.set_attribute("hipq.outcome", LEFT_OPEN)
            oldest.end()
        span_id, flags = _span_ids(span)
        attached = otel_context.attach(trace.set_span_in_context(span))
        try:
            with tracing.trying(tracing.try_context(job.trace, span_id, flags)):
                yield
        finally:
            otel_context.detach(attached)

    def tries_ended(self, changes: Iterable[Change]) -> None:
        open_spans = self._open
        for change in changes:
            if change.trace is None or change.kind == "extend":  # a heartbeat: goes on
                continue
            span = open_spans.pop((change.queue, change.id, change.attempt), None)
            if span is None:  # launched by another daemon (adopted)
                continue
            outcome = change.outcome or change.status or "unknown"
            span.set_attribute("hipq.outcome", outcome)
            if outcome != "succeeded" and outcome != "cancelled":
                span.set_status(StatusCode.ERROR, str((change.error or {}).get("detail", "")))
            span.end()

    def enqueue_spans(self, queue: str) -> tracing.EnqueueSpans:
        return _EnqueueSpans(self._tracer, queue)

    def close(self) -> None:
        open_spans, self._open = self._open, {}
        for span in open_spans.values():
            span.set_attribute("hipq.outcome", HANDED_OVER)
            span.end()
        flush = getattr(self.provider, "force_flush", None)
        if flush is not None:
            flush()


class _EnqueueSpans(tracing.EnqueueSpans):
    """One ``hipq enqueue`` span per distinct context of one enqueue call: a batch
    that inherits the request's context makes one span for all its items."""

    def __init__(self, tracer: trace.Tracer, queue: str) -> None:
        self._tracer = tracer
        self._queue = queue
        self._spans: dict[str, tuple[Span, str]] = {}  # incoming context -> span, stored
        self._of_job: dict[str, str] = {}  # job id -> its incoming context

    def parent(self, trace: str, job_id: str) -> str:
        self._of_job[job_id] = trace
        found = self._spans.get(trace)
        if found is None:
            span = self._tracer.start_span(ENQUEUE_SPAN, context=_parent(trace),
                                           kind=SpanKind.INTERNAL,
                                           attributes={"hipq.queue": self._queue})
            span_id, flags = _span_ids(span)
            found = self._spans[trace] = (span, tracing.stored(
                *tracing.try_context(trace, span_id, flags)))
        return found[1]

    def end(self, outcomes: Sequence[tuple[str, str]]) -> None:
        per_span: dict[str, list[tuple[str, str]]] = {}
        for job_id, status in outcomes:
            per_span.setdefault(self._of_job[job_id], []).append((job_id, status))
        for trace_text, (span, _) in self._spans.items():
            mine = per_span.get(trace_text, [])
            if len(mine) == 1:
                span.set_attributes({"hipq.job_id": mine[0][0], "hipq.outcome": mine[0][1]})
            else:
                span.set_attributes({"hipq.job_count": len(mine), "hipq.created": sum(
                    1 for _, status in mine if status == "created")})
            span.end()


def install_from_environment(environ: Mapping[str, str]) -> OtelTracer | None:
    """Set hipq's tracer up as the ``OTEL_*`` variables say: the global tracer provider
    if the program set one up, else a new one (``OTEL_SERVICE_NAME``, default
    ``hipq``; ``OTEL_RESOURCE_ATTRIBUTES``; ``OTEL_TRACES_SAMPLER``) exporting through
    the exporters ``OTEL_TRACES_EXPORTER`` names (default ``otlp``; each reads its own
    variables, e.g. ``OTEL_EXPORTER_OTLP_ENDPOINT``). None when no exporter loads."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        exporters = _exporters(environ)
        if not exporters:
            return None
        attributes: dict[str, Any] = {}
        if "OTEL_SERVICE_NAME" not in environ and "service.name" not in environ.get(
                "OTEL_RESOURCE_ATTRIBUTES", ""):
            attributes[SERVICE_NAME] = "hipq"
        provider = TracerProvider(resource=Resource.create(attributes))
        for exporter in exporters:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
    tracer = OtelTracer(provider)
    tracing.install(tracer)
    log.info("traces: OpenTelemetry spans on", extra={"action": "traces_on"})
    return tracer


def _exporters(environ: Mapping[str, str]) -> list[SpanExporter]:
    names = [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    found: list[SpanExporter] = []
    for name in filter(None, names):
        points = list(entry_points(group=_EXPORTER_GROUP, name=name))
        if not points:
            log.warning("traces: no OpenTelemetry exporter %r is installed (for otlp: pip "
                        "install opentelemetry-exporter-otlp); no spans", name,
                        extra={"action": "traces_no_exporter"})
            continue
        found.append(points[0].load()())
    return found

"""Traces (docs/traces.md): the W3C trace context a job carries, and the
tracer that emits hipq's spans when OpenTelemetry is set up (:mod:`hipq.otel`).

State model. A job's context is stored with it, in the ``trace`` column of ``jobs``
and ``archived_jobs``: the ``traceparent`` it was enqueued with, normalized to
version ``00`` (55 characters), then, when it came with one, a space and its
``tracestate`` (a traceparent holds no space). It is written once, at enqueue,
moves to the archive with the job, survives restarts and handovers, and is what
every try reads: a try sends the stored trace id and flags with a span id of its
own (:func:`try_context`): 64 random bits, or, with the OpenTelemetry SDK, the id
of the try's ``hipq try`` span. While a target launches a try, the try's context is
:func:`current_traceparent` (a context variable; a Python target's function sees
it too, in its worker thread).

Who is authoritative: the stored text. Without the SDK hipq keeps nothing else and
imports nothing (:data:`NOOP`); with it, :class:`hipq.otel.OtelTracer` keeps the
open ``hipq try`` spans of the tries this daemon launched, until their outcome is
persisted.

Failure modes: a malformed ``traceparent`` header is ignored, as the W3C
recommendation says (the job has no trace); a malformed ``traceparent`` or
``tracestate`` field of an enqueue body (or of an intake row's ``fields``) is
refused (422, an ``invalid`` batch item, a rejected intake row). A malformed
``tracestate`` header is dropped, its traceparent kept.

Pure: this module imports no I/O library and no OpenTelemetry.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hipq.jobs import Job
    from hipq.store.records import Change

TRACEPARENT_HEADER = "traceparent"
TRACESTATE_HEADER = "tracestate"
MAX_TRACESTATE_CHARS = 512  # the W3C limit a vendor must propagate at least
# version - trace id - parent id - flags; lower-case hex only (W3C Trace Context)
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
_TRACESTATE_CHARS = re.compile(r"[\x20-\x7e]*")
_OWS = " \t"
# The enqueue body's fields, exactly (no white space around them: a header's optional
# white space is a header's): the patterns the OpenAPI document states and the
# fields are checked with, so a value the document allows is always accepted.
_IDS = r"-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}"
TRACEPARENT_PATTERN = rf"^(?:00{_IDS}|(?!00|ff)[0-9a-f]{{2}}{_IDS}(?:-[!-~]{{0,140}})?)$"
TRACESTATE_PATTERN = r"^[!-~](?:[ -~]{0,510}[!-~])?$"
_TRACEPARENT_FIELD = re.compile(TRACEPARENT_PATTERN[1:-1])
_TRACESTATE_FIELD = re.compile(TRACESTATE_PATTERN[1:-1])

# the try a target is launching now: (traceparent, tracestate or None)
_TRY: ContextVar[tuple[str, str | None] | None] = ContextVar("hipq_try_trace", default=None)


def parse_traceparent(value: str) -> str | None:
    """``value`` as a version-00 traceparent, or None if W3C says it is invalid
    (a future version's extra fields are dropped, as the spec asks)."""
    text = value.strip(_OWS)
    match = _TRACEPARENT.match(text)
    if match is None:
        return None
    version, trace_id, span_id, flags = match.groups()
    if version == "ff" or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    if len(text) != 55 and (version == "00" or text[55] != "-"):
        return None
    return f"00-{trace_id}-{span_id}-{flags}"


def parse_tracestate(value: str) -> str | None:
    """``value`` trimmed, or None when empty, longer than :data:`MAX_TRACESTATE_CHARS`
    or holding anything but printable ASCII (its list members are not parsed: hipq
    passes them on as given)."""
    text = value.strip(_OWS)
    if not text or len(text) > MAX_TRACESTATE_CHARS or not _TRACESTATE_CHARS.fullmatch(text):
        return None
    return text


def traceparent_field(value: str) -> str | None:
    """An enqueue body's ``traceparent`` normalized, or None unless it matches
    :data:`TRACEPARENT_PATTERN` in full."""
    if _TRACEPARENT_FIELD.fullmatch(value) is None:
        return None
    return parse_traceparent(value)


def tracestate_field(value: str) -> str | None:
    """An enqueue body's ``tracestate``, or None unless it matches
    :data:`TRACESTATE_PATTERN` in full."""
    return value if _TRACESTATE_FIELD.fullmatch(value) is not None else None


def stored(traceparent: str, tracestate: str | None = None) -> str:
    """The stored form of a valid, normalized context."""
    return traceparent if not tracestate else f"{traceparent} {tracestate}"


def from_headers(headers: Any) -> str | None:
    """The stored form of a request's ``traceparent``/``tracestate`` headers (any
    mapping with ``get``), or None: no header, or a malformed traceparent (ignored)."""
    raw = headers.get(TRACEPARENT_HEADER)
    if raw is None:
        return None
    traceparent = parse_traceparent(raw)
    if traceparent is None:
        return None
    state = headers.get(TRACESTATE_HEADER)
    return stored(traceparent, None if state is None else parse_tracestate(state))


def trace_id(trace: str | None) -> str | None:
    """The trace id (32 hex digits) of a stored context."""
    return None if trace is None else trace[3:35]


def split(trace: str) -> tuple[str, str | None]:
    """A stored context as (traceparent, tracestate or None)."""
    traceparent, _, tracestate = trace.partition(" ")
    return traceparent, tracestate or None


def new_span_id() -> str:
    """16 hex digits, never all zero (not a secret: it only needs to be unique)."""
    return f"{random.getrandbits(64) or 1:016x}"


def try_context(trace: str, span_id: str, flags: str | None = None) -> tuple[str, str | None]:
    """The (traceparent, tracestate) a try sends: the stored trace id, ``span_id``,
    the stored flags (or ``flags``)."""
    traceparent, tracestate = split(trace)
    return f"00-{traceparent[3:35]}-{span_id}-{flags or traceparent[53:55]}", tracestate


@contextmanager
def trying(context: tuple[str, str | None]) -> Iterator[None]:
    """Make ``(traceparent, tracestate)`` the current try's context for a while."""
    token = _TRY.set(context)
    try:
        yield
    finally:
        _TRY.reset(token)


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` variables ask for spans: an exporter or an OTLP endpoint
    named, and neither ``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none``."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(exporter or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def current_traceparent() -> str | None:
    """The traceparent of the try being launched (in a target, or a Python target's
    function): None outside a launch or for a job without a trace."""
    current = _TRY.get()
    return None if current is None else current[0]


def current_tracestate() -> str | None:
    """The tracestate that goes with :func:`current_traceparent`, if any."""
    current = _TRY.get()
    return None if current is None else current[1]


def try_headers() -> list[tuple[str, str]]:
    """The headers that carry the current try's context (none outside one)."""
    current = _TRY.get()
    if current is None:
        return []
    traceparent, tracestate = current
    if tracestate is None:
        return [(TRACEPARENT_HEADER, traceparent)]
    return [(TRACEPARENT_HEADER, traceparent), (TRACESTATE_HEADER, tracestate)]


class Tracer:
    """The tracer without OpenTelemetry: no spans, each try gets a random span id.
    :class:`hipq.otel.OtelTracer` overrides every method."""

    active = False  # emits spans (callers skip the per-job work otherwise)

    @contextmanager
    def launching(self, job: Job) -> Iterator[None]:
        """Around the launch of a try of ``job`` (whose ``trace`` is set): the try's
        context is current (:func:`current_traceparent`)."""
        assert job.trace is not None
        with trying(try_context(job.trace, new_span_id())):
            yield

    def enqueue_spans(self, queue: str) -> EnqueueSpans | None:
        """What records this enqueue's ``hipq enqueue`` spans (None: no spans)."""
        return None

    def tries_ended(self, changes: Iterable[Change]) -> None:
        """Tries whose outcome a tick persisted (ended or re-queued)."""

    def close(self) -> None:
        """The daemon stops: end what is open, flush what is buffered."""


class EnqueueSpans:
    """The ``hipq enqueue`` spans of one enqueue call (:meth:`Tracer.enqueue_spans`)."""

    def parent(self, trace: str, job_id: str) -> str:
        """The context to store for a job enqueued under ``trace`` (the span of this
        enqueue in that trace becomes the parent of its tries)."""
        raise NotImplementedError

    def end(self, outcomes: Sequence[tuple[str, str]]) -> None:
        """The enqueue ended: ``(job id, status)`` of each job that had a trace."""
        raise NotImplementedError


NOOP = Tracer()
_tracer: Tracer = NOOP


def tracer() -> Tracer:
    """The process's tracer: :data:`NOOP` unless :func:`install` set another."""
    return _tracer


def install(new: Tracer) -> Tracer:
    """Make ``new`` the process's tracer (the daemon, once set up; tests); returns
    the one before."""
    global _tracer
    old, _tracer = _tracer, new
    return old

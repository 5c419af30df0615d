"""The W3C trace context a job carries (hipq.tracing, docs/traces.md): what is a valid
traceparent, the stored form, the try's context, and the enqueue body's fields."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from pydantic import ValidationError

from hipq import tracing
from hipq.bodies import BatchItem, EnqueueRequest

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.mark.parametrize(("given", "expected"), [
    (PARENT, PARENT),
    (f"  {PARENT}\t", PARENT),  # optional white space around a header value
    (f"00-{TRACE_ID}-00f067aa0ba902b7-00", f"00-{TRACE_ID}-00f067aa0ba902b7-00"),
    # a later version: its extra fields are dropped, and hipq sends version 00
    (f"cc-{TRACE_ID}-00f067aa0ba902b7-01-what-the-future-says",
     f"00-{TRACE_ID}-00f067aa0ba902b7-01"),
    (f"cc-{TRACE_ID}-00f067aa0ba902b7-01", f"00-{TRACE_ID}-00f067aa0ba902b7-01"),
])
def test_valid_traceparents_are_normalized(given: str, expected: str) -> None:
    assert tracing.parse_traceparent(given) == expected


@pytest.mark.parametrize("given", [
    "",
    "00",
    PARENT.upper(),  # lower-case hex only
    f"ff-{TRACE_ID}-00f067aa0ba902b7-01",  # version ff is invalid
    f"00-{'0' * 32}-00f067aa0ba902b7-01",  # an all-zero trace id
    f"00-{TRACE_ID}-{'0' * 16}-01",  # an all-zero parent id
    f"00-{TRACE_ID}-00f067aa0ba902b7-01-extra",  # version 00 has exactly four fields
    f"cc-{TRACE_ID}-00f067aa0ba902b7-01x",  # a later version: "-" after the flags
    f"00-{TRACE_ID[:-1]}-00f067aa0ba902b7-01",
    f"00_{TRACE_ID}-00f067aa0ba902b7-01",
    f"00-{TRACE_ID}-00f067aa0ba902bz-01",
])
def test_invalid_traceparents_are_refused(given: str) -> None:
    assert tracing.parse_traceparent(given) is None


def test_tracestate_is_kept_as_given_within_bounds() -> None:
    assert tracing.parse_tracestate(" rojo=00f067aa0ba902b7,congo=t61rcWkgMzE ") == (
        "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
    assert tracing.parse_tracestate("") is None
    assert tracing.parse_tracestate("a=" + "x" * 600) is None
    assert tracing.parse_tracestate("a=b\nc=d") is None


def test_headers_give_the_stored_form_and_a_bad_traceparent_is_ignored() -> None:
    assert tracing.from_headers({}) is None
    assert tracing.from_headers({"traceparent": PARENT}) == PARENT
    assert tracing.from_headers({"traceparent": PARENT, "tracestate": "k=v"}) == f"{PARENT} k=v"
    assert tracing.from_headers({"traceparent": "00-nope", "tracestate": "k=v"}) is None
    # a bad tracestate is dropped, its traceparent kept
    assert tracing.from_headers({"traceparent": PARENT, "tracestate": "k=\x01"}) == PARENT


def test_a_try_keeps_the_trace_id_and_flags_with_its_own_span_id() -> None:
    stored = tracing.stored(PARENT, "k=v")
    assert tracing.trace_id(stored) == TRACE_ID
    span = tracing.new_span_id()
    assert len(span) == 16
    assert span != "0" * 16
    assert tracing.try_context(stored, span) == (f"00-{TRACE_ID}-{span}-01", "k=v")
    assert tracing.try_context(PARENT, span, "00") == (f"00-{TRACE_ID}-{span}-00", None)
    assert len({tracing.new_span_id() for _ in range(1000)}) == 1000


def test_the_try_context_is_current_only_while_a_try_is_sent() -> None:
    assert tracing.current_traceparent() is None
    assert tracing.try_headers() == []
    with tracing.trying(("00-a-b-01", "k=v")):
        assert tracing.current_traceparent() == "00-a-b-01"
        assert tracing.current_tracestate() == "k=v"
        assert tracing.try_headers() == [("traceparent", "00-a-b-01"), ("tracestate", "k=v")]
    assert tracing.current_traceparent() is None


@pytest.mark.parametrize(("environ", "wanted"), [
    ({}, False),
    ({"OTEL_SERVICE_NAME": "x"}, False),  # nothing says where spans go
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://tempo:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://tempo:4318/v1/traces"}, True),
    ({"OTEL_TRACES_EXPORTER": "console"}, True),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
])
def test_spans_are_wanted_only_when_the_otel_variables_say_where(
        environ: dict[str, str], wanted: bool) -> None:
    assert tracing.wanted(environ) is wanted


def test_the_body_fields_are_checked_and_not_part_of_the_body_hash() -> None:
    plain = EnqueueRequest(data={"a": 1})
    traced = EnqueueRequest(data={"a": 1}, traceparent=PARENT, tracestate="k=v")
    assert traced.trace == f"{PARENT} k=v"
    assert plain.trace is None
    # a retried request with a new context is still the same job (an idempotent repeat)
    assert traced.body_hash() == plain.body_hash()
    item = BatchItem.model_validate({"id": "a", "traceparent": PARENT})
    assert item.trace == PARENT
    with pytest.raises(ValidationError, match="traceparent"):
        EnqueueRequest(traceparent="00-nope")
    with pytest.raises(ValidationError, match="tracestate"):
        EnqueueRequest(traceparent=PARENT, tracestate="\x00")


@pytest.mark.parametrize(("given", "valid"), [
    (PARENT, True),
    (f"cc-{TRACE_ID}-00f067aa0ba902b7-01-later", True),
    (f" {PARENT}", False),  # a body field is exact: white space is a header's
    (f"{PARENT}\n", False),
    (f"00-{TRACE_ID}-{'0' * 16}-01", False),
    (f"ff-{TRACE_ID}-00f067aa0ba902b7-01", False),
])
def test_the_body_field_accepts_exactly_what_its_documented_pattern_says(
        given: str, valid: bool) -> None:
    assert (re.fullmatch(tracing.TRACEPARENT_PATTERN, given) is not None) is valid
    assert (tracing.traceparent_field(given) is not None) is valid
    schema = EnqueueRequest.model_json_schema()["properties"]["traceparent"]["anyOf"][0]
    assert schema["pattern"] == tracing.TRACEPARENT_PATTERN


def test_tracing_imports_no_opentelemetry() -> None:
    code = ("import sys, hipq.tracing, hipq.engine.launcher, hipq.service; "
            "print(any(m.startswith('opentelemetry') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.strip() == "False"

"""Fuzzing the Kafka response parser (issue 13 finding 4): whatever bytes, key and
headers a message carries, ``ResponseParser.parse`` either returns a response that
both stores can hold or raises ``MalformedMessage`` (a clean skip). Pure: no
broker needed (tests/kafka/test_poison.py sends the same poison through one)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hipq.config import CorrelationConfig, KafkaResponseFields
from hipq.responses.correlation import TemplateError, render
from hipq.responses.kafka_consumer import MAX_KEY_CHARS, MalformedMessage, ResponseParser
from hipq.values import INT32_MAX, json_problem


@dataclass
class Record:
    value: bytes | None
    key: bytes | None
    headers: list[tuple[str, bytes | None]]
    topic: str = "t"
    partition: int = 0
    offset: int = 0
    timestamp: int = 0


scalars = (st.none() | st.booleans() | st.integers(-(2**80), 2**80)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=5)
           | st.sampled_from(["\x00", "\ud800", "running", "failed"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=10)
fields = st.fixed_dictionaries({}, optional={
    "status": scalars, "attempt": scalars, "retryable": scalars, "result": values,
    "error": values, "extend_seconds": scalars, "order": scalars})


@st.composite
def raw_values(draw: st.DrawFn) -> bytes | None:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.none() | st.binary(max_size=40))
    body: Any = draw(fields)
    text = json.dumps(body, allow_nan=True)
    if kind == 2:  # deep: past the depth limit, or past Python's stack
        depth = draw(st.integers(60, 3000))
        text = '{"result": ' * depth + text + "}" * depth
    if kind == 3:
        text = text.replace("0", "1e400")
    return text.encode("utf-8", "surrogatepass")


headers = st.lists(st.tuples(st.sampled_from(["Hipq-Correlation-Key", "Hipq-Attempt",
                                              "Hipq-Queue", "other"]),
                             st.none() | st.binary(max_size=12) | st.just(b"k" * 600)),
                   max_size=3)


@example(value=b'{"order": "\\ud800"}', key=None, headers=[])  # a key no store holds
@given(value=raw_values(), key=st.none() | st.binary(max_size=12), headers=headers)
@settings(max_examples=400, deadline=None, derandomize=True)
def test_the_parser_returns_a_storable_response_or_a_clean_skip(
        value: bytes | None, key: bytes | None, headers: list[tuple[str, bytes | None]]) -> None:
    parser = ResponseParser(KafkaResponseFields(), {
        "q": CorrelationConfig(response="order-{value.order}")})
    try:
        response = parser.parse(Record(value=value, key=key, headers=headers))
    except MalformedMessage:
        return
    assert "\x00" not in response.correlation_key
    assert len(response.correlation_key) <= MAX_KEY_CHARS
    response.correlation_key.encode("utf-8")
    assert response.attempt is None or 1 <= response.attempt <= INT32_MAX
    assert json_problem([response.result, response.error]) is None


@pytest.mark.parametrize("text", ["\ud800", "a\udfffb", "nul\x00"])
def test_a_template_never_makes_a_key_no_store_holds(text: str) -> None:
    """A lone surrogate (JSON's ``"\\ud800"`` decodes to one) or a NUL in a rendered
    key is refused (the Kafka consumer skips the message; HTTP answers 422)."""
    with pytest.raises(TemplateError, match="valid Unicode without NUL"):
        render("order-{value.order}", {"value": {"order": text}})

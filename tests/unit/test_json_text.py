"""hipq.json_text: the same text as ``JSONEncoder(...).encode``, or the same error."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipq.json_text import dumps, encoder

OPTIONS: list[dict[str, Any]] = [
    {},
    {"separators": (",", ":")},
    {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False, "allow_nan": False},
    {"sort_keys": True, "separators": (",", ":"), "default": str},  # a response's digest
]

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
keys = st.text() | st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(keys, inner, max_size=4), max_leaves=20)


def _outcome(encode: Any, value: Any) -> tuple[str, Any]:
    try:
        return "text", encode(value)
    except (TypeError, ValueError) as exc:
        return "error", type(exc)


@pytest.mark.parametrize("options", OPTIONS)
@settings(max_examples=300, deadline=None)
@given(value=values)
def test_the_text_or_the_error_of_json(options: dict[str, Any], value: Any) -> None:
    fast = encoder(**options)
    assert _outcome(fast, value) == _outcome(json.JSONEncoder(**options).encode, value)


@pytest.mark.parametrize("sort_keys", [False, True])
def test_default_makes_what_json_cannot_hold_as_json_encoder_does(sort_keys: bool) -> None:
    """A response's digest and a Kafka launch's value (``default=str``): a datetime,
    a Decimal or a set becomes its ``str``, at any depth, as JSONEncoder makes it."""
    value = {"at": datetime(2026, 11, 28, 9, 30, tzinfo=UTC), "b": [Decimal("1.50"), {3}],
             "a": {"nested": datetime(2026, 1, 1)}, "n": None}
    options: dict[str, Any] = {"sort_keys": sort_keys, "separators": (",", ":"), "default": str}
    text = encoder(**options)(value)
    assert text == json.JSONEncoder(**options).encode(value)
    assert '"2026-11-28 09:30:00+00:00"' in text
    assert '"1.50"' in text


def test_dumps_is_json_dumps() -> None:
    value = {"b": [1, 2.5, math.inf, None], "a": "é", "c": {"d": True}}
    assert dumps(value) == json.dumps(value)


@pytest.mark.parametrize("bad", [{"a": object()}, {"a": {1, 2}}, [b"bytes"]])
def test_what_json_refuses_is_refused_and_leaves_nothing_behind(bad: Any) -> None:
    fast = encoder(separators=(",", ":"))
    with pytest.raises(TypeError):
        fast(bad)
    shared = [1]
    assert fast({"x": shared, "y": shared}) == '{"x":[1],"y":[1]}'  # not a "cycle"


def test_a_cycle_is_refused() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(ValueError, match="Circular"):
        dumps(cyclic)
    assert dumps([[1], [1]]) == "[[1], [1]]"


def test_nan_where_not_allowed() -> None:
    strict = encoder(allow_nan=False)
    with pytest.raises(ValueError):
        strict({"x": math.nan})
    assert strict({"x": 1.5}) == '{"x": 1.5}'

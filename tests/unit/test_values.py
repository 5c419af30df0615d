"""hipq.values: what a store can hold. Values decoded from JSON text hold only JSON
types; a plugin or a Python target may hand back anything, which is judged too."""

from __future__ import annotations

import collections
import datetime
import decimal
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hipq.json_text import dumps
from hipq.values import json_problem, plugin_time

UTC = datetime.UTC


@pytest.mark.parametrize("value", [
    {"a": [1, 2.5, None, True, "é"]}, (1, 2), {"t": (1, (2, 3))}, {1: "a", 2.5: "b", None: 1},
    collections.OrderedDict(a=1), [], {}, "", 0, False,
])
def test_what_json_holds_passes(value: Any) -> None:
    assert json_problem(value) is None
    dumps(value)  # and the encoder takes it


@pytest.mark.parametrize(("value", "problem"), [
    ({1, 2}, "a value of type set is not JSON"),
    (b"x", "a value of type bytes is not JSON"),
    ({"when": datetime.datetime(2026, 1, 1)}, "a value of type datetime is not JSON"),
    ([uuid.uuid4()], "a value of type UUID is not JSON"),
    (decimal.Decimal("1.5"), "a value of type Decimal is not JSON"),
    ({(1, 2): "a"}, "an object key of type tuple is not JSON"),
    ({"x": float("nan")}, "numbers must be finite (no NaN, Infinity or 1e400)"),
    ((1, float("inf")), "numbers must be finite (no NaN, Infinity or 1e400)"),
    ({"n": 2**70}, "an integer is out of range (64-bit signed)"),
    ("a\x00b", "NUL characters are not allowed"),
])
def test_what_no_store_holds_is_named(value: Any, problem: str) -> None:
    assert json_problem(value) == problem


def test_a_tuple_counts_as_a_level_of_nesting() -> None:
    value: Any = 1
    for _ in range(65):
        value = (value,)
    assert json_problem(value) == "nested deeper than 64 levels"


@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
                    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                    | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20))
def test_whatever_passes_is_encoded(value: Any) -> None:
    if json_problem(value) is None:
        dumps(value)


def test_a_plugin_time() -> None:
    aware = datetime.datetime(2030, 1, 1, 12,
                              tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    assert plugin_time(aware) == datetime.datetime(2030, 1, 1, 10, tzinfo=UTC)
    assert plugin_time(aware).tzinfo is UTC  # type: ignore[union-attr]
    assert plugin_time(datetime.datetime(2030, 1, 1)) == datetime.datetime(2030, 1, 1,
                                                                           tzinfo=UTC)
    assert plugin_time("2030-01-01") is None
    assert plugin_time(datetime.date(2030, 1, 1)) is None
    far = datetime.datetime(9999, 12, 31, 23,
                            tzinfo=datetime.timezone(-datetime.timedelta(hours=14)))
    assert plugin_time(far) is None

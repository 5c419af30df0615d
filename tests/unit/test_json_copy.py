"""hipq.jobs.json_copy: a deep copy of JSON-shaped values (what a function or a
plugin gets of a job's data): equal, and sharing no dict or list with the original."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hipq.jobs import json_copy

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=4),
    max_leaves=30)


def _containers(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value, *(c for v in value.values() for c in _containers(v))]
    if isinstance(value, list):
        return [value, *(c for v in value for c in _containers(v))]
    return []


@given(JSON)
def test_a_copy_is_equal_and_shares_no_container(value: Any) -> None:
    copied = json_copy(value)
    assert copied == value
    assert copied == copy.deepcopy(value)
    assert not {id(c) for c in _containers(copied)} & {id(c) for c in _containers(value)}


def test_changing_the_copy_leaves_the_original() -> None:
    data = {"a": [1, {"b": 2}], "c": {"d": [3]}}
    copied = json_copy(data)
    copied["a"][1]["b"] = 9
    copied["c"]["d"].append(4)
    copied["new"] = 1
    assert data == {"a": [1, {"b": 2}], "c": {"d": [3]}}

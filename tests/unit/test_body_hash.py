"""The body hash's fast path (only ``data`` given) hashes exactly what the general
path hashes, whatever the data."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from hipq.bodies import BatchItem, EnqueueRequest

_NO_NUL = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
json_values = st.recursive(
    # what the value checks (hipq.values) let through: finite, 64-bit, no NUL
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(_NO_NUL, max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(_NO_NUL, max_size=3),
                                                                inner, max_size=3),
    max_leaves=10)


def general(request: EnqueueRequest) -> str:
    import hashlib
    return hashlib.sha256(request._canonical().encode()).hexdigest()


@given(st.dictionaries(st.text(_NO_NUL, max_size=4), json_values, max_size=4))
def test_fast_path_equals_general_path(data: dict[str, Any]) -> None:
    request = EnqueueRequest(data=data)
    assert request.body_hash() == general(request)
    assert BatchItem(id="x", data=data).body_hash() == request.body_hash()


def test_values_json_cannot_hold_take_the_general_path() -> None:
    odd: list[dict[str, Any]] = [{"nested": {1: "int key", 2: "b", 10: "c"}}, {"t": (1, 2)}]
    for data in odd:
        request = EnqueueRequest(data=data)
        assert request.body_hash() == general(request)


def test_values_no_store_can_hold_are_refused() -> None:
    for data in ({"x": math.nan}, {"x": math.inf}, {"x": 2**63}, {"x": "a\x00b"},
                 {"x": "\ud800"}, {"\udfff": 1}, {"when": datetime(2026, 1, 1, tzinfo=UTC)},
                 {"s": {"a"}}):
        with pytest.raises(ValidationError):
            EnqueueRequest(data=data)


def test_other_fields_change_the_hash() -> None:
    plain = EnqueueRequest(data={"a": 1})
    assert plain.body_hash() == EnqueueRequest(data={"a": 1}, priority=100).body_hash()
    assert plain.body_hash() != EnqueueRequest(data={"a": 1}, priority=5).body_hash()
    assert plain.body_hash() != EnqueueRequest(data={"a": 2}).body_hash()


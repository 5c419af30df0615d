"""The body hash's fast path (only ``data`` given) hashes exactly what the general
path hashes, whatever the data."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hipq.schemas import BatchItem, EnqueueRequest

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=10)


def general(request: EnqueueRequest) -> str:
    import hashlib
    return hashlib.sha256(request._canonical().encode()).hexdigest()


@given(st.dictionaries(st.text(max_size=4), json_values, max_size=4))
def test_fast_path_equals_general_path(data: dict[str, Any]) -> None:
    request = EnqueueRequest(data=data)
    assert request.body_hash() == general(request)
    assert BatchItem(id="x", data=data).body_hash() == request.body_hash()


def test_values_json_cannot_hold_take_the_general_path() -> None:
    odd: list[dict[str, Any]] = [
        {"when": datetime(2026, 1, 1, tzinfo=UTC)}, {"x": math.nan}, {"x": math.inf},
        {"nested": {1: "int key", 2: "b", 10: "c"}}, {"t": (1, 2)}, {"s": {"a"}}]
    for data in odd:
        request = EnqueueRequest(data=data)
        assert request.body_hash() == general(request)


def test_other_fields_change_the_hash() -> None:
    plain = EnqueueRequest(data={"a": 1})
    assert plain.body_hash() == EnqueueRequest(data={"a": 1}, priority=100).body_hash()
    assert plain.body_hash() != EnqueueRequest(data={"a": 1}, priority=5).body_hash()
    assert plain.body_hash() != EnqueueRequest(data={"a": 2}).body_hash()


"""hipq.json_text.json_of: how the PostgreSQL driver reads json and jsonb
values, through the C scanner json.loads ends in; the same values as json.loads,
and its errors, whatever the text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hipq.json_text import json_of

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=4),
    max_leaves=30)


@given(JSON, st.sampled_from([(", ", ": "), (",", ":")]))
def test_the_values_of_json_loads(value: Any, separators: tuple[str, str]) -> None:
    text = json.dumps(value, separators=separators, ensure_ascii=False)
    assert json_of(text) == json.loads(text)


@given(st.text(max_size=20))
def test_any_text_reads_or_fails_as_json_loads_does(text: str) -> None:
    def outcome(read: Any) -> tuple[str, Any]:
        try:
            return "value", read(text)
        except json.JSONDecodeError as exc:
            return "error", str(exc)

    kind, expected = outcome(json.loads)
    got = outcome(json_of)
    assert got == (kind, expected) or (kind == "value" and expected != expected)  # NaN


@pytest.mark.parametrize("text", [" 1", "1 ", "1 2", "", "{", "[1,]", "NaN", "1e400"])
def test_edges(text: str) -> None:
    try:
        expected = json.loads(text)
    except json.JSONDecodeError:
        with pytest.raises(json.JSONDecodeError):
            json_of(text)
    else:
        got = json_of(text)
        assert got == expected or (got != got and expected != expected)

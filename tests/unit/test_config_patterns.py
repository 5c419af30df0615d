"""The configuration's patterns (hipq.config.Matching): checked in Python, published
and refused exactly as pydantic's ``Field(pattern=...)`` would (the same JSON
schema, the same ``string_pattern_mismatch`` error), with no Rust regex compiled
for them (about 20 KB of a daemon's RSS each, docs/benchmarks.md "Idle memory");
only a time window's, shared with the request bodies, stays in Rust."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from hipq.config import HOUR_MINUTE, QUEUE_ID_PATTERN, Matching, Settings


class _Rust(BaseModel):
    id: Annotated[str, Field(pattern=QUEUE_ID_PATTERN)]
    url: Annotated[str, Field(max_length=20, pattern=r"^https?://\S*$")] | None = None


class _Python(BaseModel):
    id: Annotated[str, Matching(QUEUE_ID_PATTERN)]
    url: Annotated[str, Field(max_length=20), Matching(r"^https?://\S*$")] | None = None


def _errors(model: type[BaseModel], value: dict[str, Any]) -> list[tuple[Any, ...]]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(value)
    return [(e["type"], e["loc"], e["msg"], e.get("ctx")) for e in caught.value.errors()]


def test_the_same_json_schema_as_a_pydantic_pattern() -> None:
    for mode in ("validation", "serialization"):
        rust = _Rust.model_json_schema(mode=mode)
        python = _Python.model_json_schema(mode=mode)
        assert python["properties"] == rust["properties"]


@pytest.mark.parametrize("value", [
    {"id": "a b"}, {"id": ""}, {"id": "x" * 101}, {"id": "q\n"},  # no newline after $
    {"id": "q", "url": "ftp://x"}, {"id": "q", "url": "http://" + "x" * 30},
])
def test_the_same_errors_as_a_pydantic_pattern(value: dict[str, Any]) -> None:
    assert _errors(_Python, value) == _errors(_Rust, value)


def test_a_match_passes() -> None:
    assert _Python.model_validate({"id": "a.b:c-d_1", "url": "https://x/y"}).id == "a.b:c-d_1"


def _patterns(node: Any, found: set[str]) -> set[str]:
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str) and node.get("type") == "str":
            found.add(node["pattern"])
        for value in node.values():
            _patterns(value, found)
    elif isinstance(node, list | tuple):
        for value in node:
            _patterns(value, found)
    return found


def test_no_rust_pattern_in_the_configuration_but_the_time_windows() -> None:
    assert _patterns(Settings.__pydantic_core_schema__, set()) == {HOUR_MINUTE}

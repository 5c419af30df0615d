"""The batch's shortcut for the usual item (``{"id": ..., "data": {...}}``, read as a
:class:`~hipq.bodies.DataOnly` without a model) answers exactly as the models do:
the same items valid, the same errors for the others, the same requests (fields and
body hash) for the valid ones, whatever the batch holds."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hipq.api.handlers import _batch_items, _validated_items
from hipq.bodies import DataOnly, EnqueueRequest
from hipq.values import MAX_DEPTH

# what a JSON parser gives, storable or not: big integers, NaN and infinity (parse_json
# lets them through for the value checks), NUL, lone surrogates
_TEXT = st.text(max_size=4) | st.sampled_from(["", "a", "é", "\x00", "\ud800", "\x1e", "n"])
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([2**63, -(2**63) - 1, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([math.nan, math.inf, -math.inf]), _TEXT)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)), max_leaves=8)


def _deep(levels: int) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for _ in range(levels - 1):
        data = {"a": data}
    return data


ids = st.one_of(
    st.from_regex(r"[A-Za-z0-9_.:-]{1,12}", fullmatch=True),
    st.sampled_from([".", "..", "...", ".a", "..a", "a.", "", "a b", "a/b", "é", "a\n",
                     "x" * 200, "x" * 201, "\ud800"]),
    st.integers(), st.none(), st.booleans())
datas = st.one_of(st.dictionaries(_TEXT, json_values, max_size=4), json_values,
                  st.sampled_from([_deep(MAX_DEPTH), _deep(MAX_DEPTH + 1)]))
# other enqueue fields, well and badly typed
extra = st.dictionaries(
    st.sampled_from(["priority", "critical", "weight", "run_after", "ordering_key",
                     "traceparent", "unknown"]),
    st.one_of(st.integers(-5, 5), st.booleans(), st.sampled_from(["k", "2026-01-01T00:00:00Z"]),
              st.none()), max_size=2)


@st.composite
def items(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["usual", "usual", "usual", "no data", "more", "odd"]))
    if kind == "odd":
        return draw(st.one_of(json_values, st.just({"data": {}}), st.just({})))
    item: dict[str, Any] = {"id": draw(ids)}
    if kind != "no data":
        item["data"] = draw(datas)
    if kind == "more":
        item.update(draw(extra))
    return item


def _as_request(value: Any) -> EnqueueRequest:
    return value.request() if isinstance(value, DataOnly) else value


def _same(fast: Any, general: Any) -> None:
    assert fast[0] == general[0]
    if isinstance(general[1], str):
        assert fast[1] == general[1]
        return
    got, expected = _as_request(fast[1]), general[1]
    assert got.model_dump(exclude={"id"}) == expected.model_dump(exclude={"id"})
    assert json.dumps(got.data) == json.dumps(expected.data)  # 1 is not True, order kept
    assert fast[1].body_hash() == expected.body_hash() == got.body_hash()


@settings(max_examples=500, deadline=None)
@given(raw=st.lists(items(), max_size=6))
def test_the_shortcut_answers_as_the_models(raw: list[Any]) -> None:
    fast, general = _batch_items(raw), _validated_items(raw)
    assert len(fast) == len(general) == len(raw)
    for one, other in zip(fast, general, strict=True):
        _same(one, other)


_STORABLE = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
                    max_size=3)


@settings(max_examples=200, deadline=None)
@given(batch=st.lists(st.tuples(
    st.from_regex(r"[A-Za-z0-9_:-]{1,10}", fullmatch=True),
    st.dictionaries(_STORABLE, st.integers(-(2**63), 2**63 - 1) | _STORABLE, max_size=3)),
    max_size=5))
def test_usual_items_take_the_shortcut(batch: list[tuple[str, dict[str, Any]]]) -> None:
    raw = [{"id": job_id, "data": data} for job_id, data in batch]
    for (job_id, data), (got_id, request) in zip(batch, _batch_items(raw), strict=True):
        assert got_id == job_id
        assert isinstance(request, DataOnly)
        assert request.data is data  # as parsed, not copied
        assert json.loads(request.text) == data


def test_an_item_without_data_has_empty_data() -> None:
    ((job_id, request),) = _batch_items([{"id": "a"}])
    assert job_id == "a"
    assert isinstance(request, DataOnly)
    assert request.data == {}
    assert request.body_hash() == EnqueueRequest().body_hash()


def test_other_items_go_to_the_models_and_keep_their_place() -> None:
    raw = [{"id": "a", "data": {"n": 1}}, {"id": "b", "priority": 5}, {"id": "."},
           {"id": "c", "data": []}, {"id": "d"}]
    got = _batch_items(raw)
    assert [i for i, _ in got] == ["a", "b", ".", "c", "d"]
    assert isinstance(got[0][1], DataOnly)
    assert isinstance(got[1][1], EnqueueRequest)
    assert got[1][1].priority == 5
    assert isinstance(got[2][1], str)
    assert got[3][1] == "data: Input should be of JSON type object"
    assert isinstance(got[4][1], DataOnly)


def test_data_no_store_can_hold_is_the_models_error() -> None:
    raw = [{"id": "a", "data": {"n": 1}}, {"id": "b", "data": {"x": math.nan}},
           {"id": "c", "data": {"x": 2**63}}, {"id": "d", "data": _deep(MAX_DEPTH + 1)}]
    got = _batch_items(raw)
    assert got == _validated_items(raw)
    assert [isinstance(r, str) for _, r in got] == [False, True, True, True]

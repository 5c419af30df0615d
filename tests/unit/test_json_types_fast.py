"""``type_problem``'s shortcut (a body judged by the types of its values when each of
its properties says no more than a JSON type) answers as the whole walk does."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from hipq.api.models import BatchEnvelope
from hipq.bodies import BatchItem, EnqueueRequest, ResponseRequest
from hipq.config import QueueConfig
from hipq.json_types import _model_checker, type_problem

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=6)
names = st.sampled_from(["jobs", "id", "data", "priority", "critical", "weight", "run_after",
                         "timezone", "time_windows", "correlation_key", "concurrency",
                         "paused", "target", "unknown", "status", "attempt", "result",
                         "error", "retryable", "extend_seconds"])
statuses = st.sampled_from(["succeeded", "failed", "running", "throttled", "SUCCEEDED", ""])
bodies = st.dictionaries(names, st.one_of(values, statuses), max_size=5)


def _whole_walk(value: Any, model: type[BaseModel]) -> Any:
    checker, schema = _model_checker(model)
    return checker.problem(value, schema, [])


@settings(max_examples=400, deadline=None)
@given(body=bodies)
def test_the_shortcut_agrees_with_the_whole_walk(body: dict[str, Any]) -> None:
    for model in (BatchItem, EnqueueRequest, QueueConfig, ResponseRequest, BatchEnvelope):
        assert (type_problem(body, model) is None) == (_whole_walk(body, model) is None)


def test_the_usual_bodies_take_the_shortcut_and_the_wrong_types_do_not() -> None:
    assert type_problem({"id": "a", "data": {"x": [1, {"y": None}]}}, BatchItem) is None
    assert type_problem({"id": "a", "critical": 0}, BatchItem) == (
        ["critical"], "Input should be of JSON type boolean")
    assert type_problem({"id": "a", "priority": "5"}, BatchItem) is not None
    assert type_problem({"id": "a", "priority": 5.0}, BatchItem) is None  # as JSON Schema


def test_a_usual_response_takes_the_shortcut_and_a_wrong_status_does_not() -> None:
    from hipq.json_types import _enum_properties, _plain_properties

    assert _enum_properties(ResponseRequest) == {
        "status": frozenset({"succeeded", "failed", "running", "throttled"})}
    assert {"result", "error", "attempt", "retryable"} <= set(_plain_properties(ResponseRequest))
    assert type_problem({"status": "succeeded", "result": {"a": [1, None]}}, ResponseRequest) \
        is None
    assert type_problem({"status": "done"}, ResponseRequest) == (
        ["status"], "Input should be one of the values the schema lists")
    assert type_problem({"status": 1}, ResponseRequest) == (
        ["status"], "Input should be of JSON type string")
    assert type_problem({"retryable": 0}, ResponseRequest) is not None


def test_a_batch_envelope_takes_the_shortcut() -> None:
    """Its items are any JSON (each is checked on its own afterwards): the envelope is
    judged by ``jobs`` being an array, not by a walk of every item's data."""
    items = [{"id": f"j{i}", "data": {"n": [i, {"deep": None}]}} for i in range(3)]
    assert type_problem({"jobs": items}, BatchEnvelope) is None
    assert type_problem({"jobs": [1, "x", None]}, BatchEnvelope) is None
    assert type_problem({"jobs": {"a": 1}}, BatchEnvelope) == (
        ["jobs"], "Input should be of JSON type array")

"""One dotted-path lookup and one rendering (hipq.paths), used by quotas, rate-limit
keys, correlation templates and Kafka response fields: they agree on list indexes
and booleans (a ``true`` renders as ``true`` in a template and counts in a quota)."""

from __future__ import annotations

from typing import Any

import pytest

from hipq.paths import MISSING, as_text, field_text, lookup
from hipq.responses.correlation import TemplateError, render
from hipq.responses.kafka_consumer import _get
from hipq.spec import QuotaSpec
from hipq.throttling.quotas import field_value, group_of

DATA: dict[str, Any] = {"region": "east", "vip": True, "n": 7, "x": 1.5, "none": None,
                        "items": [{"sku": "a1"}, {"sku": "b2"}], "obj": {"k": "v"},
                        "list": [1, 2]}


@pytest.mark.parametrize(("path", "found"), [
    ("region", "east"), ("vip", True), ("items.1.sku", "b2"), ("obj.k", "v"),
    ("items.2.sku", MISSING), ("items.x", MISSING), ("obj.k.deeper", MISSING),
    ("missing", MISSING), ("none", None), ("list.01", 2)])
def test_lookup(path: str, found: Any) -> None:
    assert lookup(DATA, path) == found if found is not MISSING else lookup(DATA, path) is MISSING


@pytest.mark.parametrize(("value", "text"), [
    ("a", "a"), (True, "true"), (False, "false"), (7, "7"), (1.5, "1.5"), (None, None),
    ({"k": 1}, None), ([1], None), (MISSING, None)])
def test_as_text(value: Any, text: str | None) -> None:
    assert as_text(value) == text


@pytest.mark.parametrize("path", ["region", "vip", "n", "x", "items.0.sku", "none",
                                  "obj", "missing"])
def test_every_user_agrees(path: str) -> None:
    """Quotas, templates and the Kafka response fields see the same value."""
    text = field_text(DATA, path)
    assert field_value(DATA, path) == text
    if text is None:
        with pytest.raises(TemplateError):
            render(f"{{data.{path}}}", {"data": DATA})
    else:
        assert render(f"{{data.{path}}}", {"data": DATA}) == text
    found = lookup(DATA, path)
    assert _get(DATA, path) == (None if found is MISSING else found)


def test_a_boolean_field_is_a_quota_group() -> None:
    spec = QuotaSpec(field="vip", shares={"true": 0.5})
    assert group_of(DATA, spec.field, spec.shares) == "true"

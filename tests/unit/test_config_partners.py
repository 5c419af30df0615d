"""``partners:`` in the configuration (docs/throttling.md, "Partners"): declared once,
named by queues; what is wrong says so and changes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from hipq.config import parse_settings
from hipq.errors import ConfigError
from hipq.spec import LimitSpec

LLM: dict[str, Any] = {
    "id": "llm", "concurrency": 40,
    "limits": [{"requests": 500, "per_seconds": 60}, {"cost": 90000, "per_seconds": 60},
               {"requests": 10000, "per_seconds": 86400}],
    "cost": {"estimate": "max_tokens", "default": 1}, "by": "api_key",
    "backoff": {"initial_seconds": 1, "max_seconds": 300, "max_partner_seconds": 3600}}


def settings(partners: list[dict[str, Any]], queues: list[dict[str, Any]]) -> Any:
    return parse_settings({"partners": partners, "queues": queues})


def test_the_worked_example_parses_into_a_partner_spec() -> None:
    found = settings([LLM], [{"id": "summaries", "partner": "llm", "concurrency": 20},
                             {"id": "embeddings", "partner": "llm"}])
    spec = found.partners[0].to_spec()
    assert spec.limits == (LimitSpec(unit="requests", amount=500, per_seconds=60),
                           LimitSpec(unit="cost", amount=90000, per_seconds=60),
                           LimitSpec(unit="requests", amount=10000, per_seconds=86400))
    assert (spec.concurrency, spec.cost_field, spec.cost_default, spec.by) == (
        40, "max_tokens", 1.0, "api_key")
    assert spec.backoff is not None
    assert spec.backoff.max_partner_seconds == 3600
    assert [q.to_spec().partner for q in found.queues] == ["llm", "llm"]


@pytest.mark.parametrize(("partners", "queues", "message"), [
    ([], [{"id": "q", "partner": "llm"}], "names partner 'llm', which is not declared"),
    ([{"id": "llm"}, {"id": "llm"}], [], "a partner id is declared twice"),
    ([{"id": "llm", "limits": [{"requests": 1, "cost": 2, "per_seconds": 1}]}], [],
     "either requests or cost"),
    ([{"id": "llm", "limits": [{"per_seconds": 1}]}], [], "either requests or cost"),
    ([{"id": "llm", "limits": [{"requests": 0, "per_seconds": 1}]}], [], "greater than 0"),
    ([{"id": "llm", "limits": [{"requests": 1, "per_seconds": -1}]}], [], "greater than 0"),
    ([{"id": "llm", "cost": {"estimate": "a..b"}}], [], "pattern"),
    ([{"id": "llm", "cost": {"default": -1}}], [], "greater than or equal to 0"),
    ([{"id": "llm", "limits": [{"requests": 1, "per_seconds": 1}] * 17}], [], "at most 16"),
    ([{"id": "llm", "rate": 5}], [], "rate"),
])
def test_a_wrong_partner_is_a_clear_error(partners: list[dict[str, Any]],
                                          queues: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings(partners, queues)

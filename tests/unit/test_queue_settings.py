"""hipq.queue_settings: the QueueSpec of a queue's stored settings says what the
validated model of the same settings says, key by key."""

from __future__ import annotations

import dataclasses
from enum import Enum
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from hipq.config import QueueConfig
from hipq.queue_settings import spec_of
from hipq.spec import QueueSpec

FULL = {
    "id": "q", "delivery_strategy": "at_most_once", "attempts": 5, "concurrency": 10,
    "critical_concurrency": 0, "ordering": "priority_then_time", "aging_seconds": 5,
    "timeout_seconds": 30, "heartbeat_timeout_seconds": 10, "default_weight": 2,
    "timezone": "Europe/Paris", "time_windows": [{"start": "09:00", "end": "17:00"}],
    "quotas": {"field": "tenant", "shares": {"a": 0.5, "b": 0.25}, "default": 0.25,
               "lend_unused": True},
    "rate_limit": {"launches": 5, "per_seconds": 1, "by": "tenant"},
    "backoff": {"scope": "group", "field": "tenant", "initial_seconds": 2, "max_seconds": 10,
                "max_partner_seconds": 100, "max_throttled": 3},
    "adaptive": {"min": 2, "increase_every": 5, "decrease": 0.7},
    "merge_by_ordering_key": True, "ordering_key_mode": "relaxed_on_retry", "paused": True,
    "target": {"kind": "memory"}, "correlation": {"response": "{value.key}"},
    "throttler": {"plugin": "plugins.x:Y", "options": {"n": 1}},
    "retry": {"strategy": "exponential", "base_seconds": 2, "options": {"max_seconds": 9}},
}
DERIVED = {"critical_concurrency", "custom_throttler", "retry"}  # checked on their own


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _plain(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict | MappingProxyType):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value.value if isinstance(value, Enum) else value


def test_each_key_of_the_spec_is_the_models() -> None:
    """Generic over QueueSpec's fields: a field added to both the model and the spec
    is carried over, or this fails."""
    config = QueueConfig.model_validate(FULL)
    spec = spec_of(config.stored())
    assert spec == config.to_spec()
    for field in dataclasses.fields(QueueSpec):
        if field.name not in DERIVED:
            assert _plain(getattr(spec, field.name)) == _plain(getattr(config, field.name)), (
                field.name)
    assert (spec.critical_concurrency, spec.custom_throttler) == (0, True)
    assert (spec.retry.strategy, dict(spec.retry.options)) == (
        "exponential", config.retry.all_options())


def test_every_spec_field_but_the_derived_is_a_setting() -> None:
    assert {f.name for f in dataclasses.fields(QueueSpec)} - DERIVED <= set(
        QueueConfig.model_fields)


def test_missing_and_none_keys_are_the_defaults() -> None:
    assert spec_of({"id": "q"}) == QueueConfig(id="q").to_spec() == QueueSpec(id="q")
    assert spec_of({"id": "q", "concurrency": None, "quotas": None}) == QueueSpec(id="q")
    spec = spec_of({"id": "q", "concurrency": 4})
    assert spec.critical_concurrency == 4  # unset: the same as concurrency


def test_the_spec_is_frozen_and_holds_no_stored_mapping() -> None:
    settings = QueueConfig.model_validate(FULL).stored()
    spec = spec_of(settings)
    settings["quotas"]["shares"]["a"] = 1.0
    settings["time_windows"][0]["start"] = "00:00"
    settings["retry"]["options"]["max_seconds"] = 1
    assert spec == spec_of(QueueConfig.model_validate(FULL).stored())

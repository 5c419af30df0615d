"""A queue's settings as stored, and the :class:`~hipq.spec.QueueSpec` made of them.

The store keeps a queue's settings as a JSON mapping: what a validated
``QueueConfig`` (``hipq.config``, the edge that parses YAML and API bodies) dumps,
``None`` values left out. :func:`spec_of` reads that mapping into the frozen view
the engine, throttlers and plugins use; the store builds it once per settings
change, and ``QueueConfig.to_spec`` is the same function over the same dump, so
there is one way from settings to a spec. Pure: no validation (the edge did it),
no I/O, no pydantic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from types import MappingProxyType
from typing import Any

from hipq.jobs import DeliveryStrategy, Ordering
from hipq.spec import AdaptiveSpec, BackoffSpec, QueueSpec, QuotaSpec, RateLimitSpec, RetrySpec

Settings = Mapping[str, Any]  # a queue's settings as stored: JSON values by key


def _known(cls: Any, raw: Settings) -> dict[str, Any]:
    """The keys of ``raw`` that are fields of the dataclass ``cls``, None left out."""
    names = {f.name for f in fields(cls)}
    return {key: value for key, value in raw.items() if key in names and value is not None}


def _quotas(raw: Settings) -> QuotaSpec:
    return QuotaSpec(**{**_known(QuotaSpec, raw),
                        "shares": MappingProxyType(dict(raw.get("shares") or {}))})


def _retry(raw: Settings) -> RetrySpec:
    """``options`` merged with the flat option keys (``base_seconds: 1``), as
    ``RetryConfig.all_options`` merges them: ``options`` wins."""
    flat = {key: value for key, value in raw.items()
            if key not in ("strategy", "plugin", "options")}
    return RetrySpec(strategy=raw.get("strategy"), plugin=raw.get("plugin"),
                     options=MappingProxyType({**flat, **(raw.get("options") or {})}))


# how a stored value becomes a spec's; a field not named here is taken as stored
_MADE: dict[str, Callable[[Any], Any]] = {
    "delivery_strategy": DeliveryStrategy,
    "ordering": Ordering,
    "time_windows": lambda windows: tuple(MappingProxyType(dict(w)) for w in windows),
    "quotas": _quotas,
    "rate_limit": lambda raw: RateLimitSpec(**_known(RateLimitSpec, raw)),
    "backoff": lambda raw: BackoffSpec(**_known(BackoffSpec, raw)),
    "adaptive": lambda raw: AdaptiveSpec(**_known(AdaptiveSpec, raw)),
    "retry": _retry,
}
_DERIVED = ("critical_concurrency", "custom_throttler")  # made of other keys, below
_FIELDS = tuple(f.name for f in fields(QueueSpec) if f.name not in _DERIVED)


def spec_of(settings: Settings) -> QueueSpec:
    """The :class:`QueueSpec` of a queue's stored settings (a missing or None key:
    the default). ``critical_concurrency`` unset means ``concurrency``; a
    ``throttler`` plugin makes ``custom_throttler`` true."""
    values = {name: _MADE[name](value) if name in _MADE else value
              for name in _FIELDS if (value := settings.get(name)) is not None}
    critical = settings.get("critical_concurrency")
    return QueueSpec(**values,
                     critical_concurrency=values.get("concurrency") if critical is None
                     else critical,
                     custom_throttler=settings.get("throttler") is not None)

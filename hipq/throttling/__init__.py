"""Built-in throttling parts, one per module; pure (no I/O, no configuration models).

Every part is a plain object a custom throttler can reuse (also exported from
``hipq.plugins``): ``CapacityPool`` (weighted concurrency), ``QuotaPlan`` (group
shares), ``OrderingKeys`` (one running job per key), ``RateBudget`` (sliding-window
rate limits), ``RunningUsage`` (what the running jobs hold, summed),
``is_open``/``next_open`` (time windows), ``effective_priority`` (aging). The
built-in throttler composes them (``hipq.engine.throttle``).

The names below are imported on first use (PEP 562), so a part loads only what it
imports itself.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hipq.throttling.aging import effective_priority, in_queue_order
    from hipq.throttling.capacity import CapacityPool
    from hipq.throttling.keys import OrderingKeys
    from hipq.throttling.quotas import DEFAULT_GROUP, QuotaPlan, field_value, group_of
    from hipq.throttling.rate import RateBudget
    from hipq.throttling.usage import RunningUsage
    from hipq.throttling.windows import is_open, next_open, windows_of

_WHERE = {
    "CapacityPool": "hipq.throttling.capacity",
    "DEFAULT_GROUP": "hipq.throttling.quotas",
    "OrderingKeys": "hipq.throttling.keys",
    "QuotaPlan": "hipq.throttling.quotas",
    "RateBudget": "hipq.throttling.rate",
    "RunningUsage": "hipq.throttling.usage",
    "effective_priority": "hipq.throttling.aging",
    "field_value": "hipq.throttling.quotas",
    "group_of": "hipq.throttling.quotas",
    "in_queue_order": "hipq.throttling.aging",
    "is_open": "hipq.throttling.windows",
    "next_open": "hipq.throttling.windows",
    "windows_of": "hipq.throttling.windows",
}

__all__ = [
    "DEFAULT_GROUP",
    "CapacityPool",
    "OrderingKeys",
    "QuotaPlan",
    "RateBudget",
    "RunningUsage",
    "effective_priority",
    "field_value",
    "group_of",
    "in_queue_order",
    "is_open",
    "next_open",
    "windows_of",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

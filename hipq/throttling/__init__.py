"""Built-in throttling parts, one per module; pure (no I/O, no configuration models).

Every part is a plain object a custom throttler can reuse (also exported from
``hipq.plugins``): ``CapacityPool`` (weighted concurrency), ``QuotaPlan`` (group
shares), ``OrderingKeys`` (one running job per key), ``RateBudget`` (sliding-window
rate limits), ``RunningUsage`` (what the running jobs hold, summed),
``is_open``/``next_open`` (time windows), ``effective_priority`` (aging). The
built-in throttler composes them (``hipq.engine.throttle``).
"""

from hipq.throttling.aging import effective_priority, in_queue_order
from hipq.throttling.capacity import CapacityPool
from hipq.throttling.keys import OrderingKeys
from hipq.throttling.quotas import DEFAULT_GROUP, QuotaPlan, field_value, group_of
from hipq.throttling.rate import RateBudget
from hipq.throttling.usage import RunningUsage
from hipq.throttling.windows import is_open, next_open, windows_of

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

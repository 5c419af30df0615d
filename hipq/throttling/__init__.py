"""Built-in throttling, one part per module, composed by :class:`BuiltinThrottler`.

Every part is a plain object a custom throttler can reuse (also exported from
``hipq.plugins``): ``CapacityPool`` (weighted concurrency), ``QuotaPlan`` (group
shares), ``OrderingKeys`` (one running job per key), ``RateBudget`` (sliding-window
rate limits), ``is_open``/``next_open`` (time windows), ``effective_priority``
(aging).
"""

from hipq.throttling.aging import effective_priority, in_queue_order
from hipq.throttling.builtin import BuiltinThrottler, build_throttler, window_of
from hipq.throttling.capacity import CapacityPool
from hipq.throttling.keys import OrderingKeys
from hipq.throttling.quotas import DEFAULT_GROUP, QuotaPlan, field_value, group_of
from hipq.throttling.rate import RateBudget
from hipq.throttling.windows import is_open, next_open

__all__ = [
    "DEFAULT_GROUP",
    "BuiltinThrottler",
    "CapacityPool",
    "OrderingKeys",
    "QuotaPlan",
    "RateBudget",
    "build_throttler",
    "effective_priority",
    "field_value",
    "group_of",
    "in_queue_order",
    "is_open",
    "next_open",
    "window_of",
]

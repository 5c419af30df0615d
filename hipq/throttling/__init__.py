"""Built-in throttling, one part per module, composed by :class:`BuiltinThrottler`.

Parts are plain objects a custom throttler can reuse (``hipq.throttling.capacity``).
"""

from hipq.throttling.builtin import BuiltinThrottler, build_throttler
from hipq.throttling.capacity import CapacityPool

__all__ = ["BuiltinThrottler", "CapacityPool", "build_throttler"]

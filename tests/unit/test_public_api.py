"""The public surface is intentional: adding or removing a name is a decision."""

from __future__ import annotations

import hipq
import hipq.plugins


def test_hipq_exports() -> None:
    assert sorted(hipq.__all__) == sorted([
        "ConfigError", "ConflictError", "Daemon", "EnqueueRequest", "Hipq", "HipqError", "Job",
        "JobNotFound", "JobState", "QueueConfig", "QueueNotFound", "ReconcileResult",
        "Reconciler", "ResponseRequest", "Settings", "Store", "Throttled", "load_config",
        "open_store",
    ])
    for name in hipq.__all__:
        assert getattr(hipq, name) is not None


def test_plugin_api_exports() -> None:
    assert sorted(hipq.plugins.__all__) == sorted([
        "DEFAULT_GROUP", "CapacityPool", "GiveUp", "Job", "JobError", "OrderingKeys",
        "QueueSpec", "QuotaPlan", "QuotaSpec", "RateBudget", "RateLimitSpec", "Retry",
        "RetryContext", "RetryStrategy", "RunningUsage", "ThrottleContext", "ThrottleResult",
        "Throttler",
        "effective_priority", "field_value", "group_of", "is_open", "load_object", "next_open",
        "windows_of",
    ])
    for name in hipq.plugins.__all__:
        assert getattr(hipq.plugins, name) is not None

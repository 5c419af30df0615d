"""hipq: a durable job scheduler daemon for work that talks to external services.

The names below are imported on first use (PEP 562), so ``import hipq.plugins``
or ``import hipq.client`` does not load the database drivers, aiohttp or aiokafka.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_WHERE = {
    "ConfigError": "hipq.errors",
    "ConflictError": "hipq.errors",
    "Daemon": "hipq.daemon",
    "EnqueueRequest": "hipq.bodies",
    "Hipq": "hipq.service",
    "HipqError": "hipq.errors",
    "Job": "hipq.jobs",
    "JobNotFound": "hipq.errors",
    "JobState": "hipq.jobs",
    "QueueConfig": "hipq.config",
    "QueueNotFound": "hipq.errors",
    "ReconcileResult": "hipq.engine",
    "Reconciler": "hipq.engine",
    "ResponseRequest": "hipq.bodies",
    "Settings": "hipq.config",
    "Store": "hipq.store",
    "Throttled": "hipq.throttled",
    "load_config": "hipq.config",
    "open_store": "hipq.store",
}

__all__ = [
    "ConfigError",
    "ConflictError",
    "Daemon",
    "EnqueueRequest",
    "Hipq",
    "HipqError",
    "Job",
    "JobNotFound",
    "JobState",
    "QueueConfig",
    "QueueNotFound",
    "ReconcileResult",
    "Reconciler",
    "ResponseRequest",
    "Settings",
    "Store",
    "Throttled",
    "load_config",
    "open_store",
]

if TYPE_CHECKING:
    from hipq.bodies import EnqueueRequest, ResponseRequest
    from hipq.config import QueueConfig, Settings, load_config
    from hipq.daemon import Daemon
    from hipq.engine import Reconciler, ReconcileResult
    from hipq.errors import ConfigError, ConflictError, HipqError, JobNotFound, QueueNotFound
    from hipq.jobs import Job, JobState
    from hipq.service import Hipq
    from hipq.store import Store, open_store
    from hipq.throttled import Throttled


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'hipq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

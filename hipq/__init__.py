"""hipq: a durable job scheduler daemon for work that talks to external services.

The names below are imported on first use, so ``hipq --help`` and tools that only
need a submodule do not pay for the whole package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hipq.config import QueueConfig, Settings, load_config
    from hipq.daemon import Daemon
    from hipq.errors import ConfigError, ConflictError, HipqError, JobNotFound, QueueNotFound
    from hipq.jobs import Job, JobState
    from hipq.reconciler import Reconciler, ReconcileResult
    from hipq.schemas import EnqueueRequest, ResponseRequest
    from hipq.service import Hipq
    from hipq.store import SQLStore, open_store

__version__ = "0.1.0"

_WHERE = {
    "ConfigError": "hipq.errors", "ConflictError": "hipq.errors", "HipqError": "hipq.errors",
    "JobNotFound": "hipq.errors", "QueueNotFound": "hipq.errors",
    "Daemon": "hipq.daemon", "EnqueueRequest": "hipq.schemas",
    "ResponseRequest": "hipq.schemas", "Hipq": "hipq.service", "Job": "hipq.jobs",
    "JobState": "hipq.jobs", "QueueConfig": "hipq.config", "Settings": "hipq.config",
    "load_config": "hipq.config", "ReconcileResult": "hipq.reconciler",
    "Reconciler": "hipq.reconciler", "SQLStore": "hipq.store", "open_store": "hipq.store",
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
    "SQLStore",
    "Settings",
    "load_config",
    "open_store",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'hipq' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

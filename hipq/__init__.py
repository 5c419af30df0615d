"""hipq: a durable job scheduler daemon for work that talks to external services.

The names below are imported on first use (PEP 562), so that ``import hipq.client``
or ``import hipq.downstream`` does not load the daemon's stack (SQLAlchemy,
aiokafka, the API server).
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

_SOURCES = {
    "ConfigError": "hipq.errors",
    "ConflictError": "hipq.errors",
    "Daemon": "hipq.daemon",
    "EnqueueRequest": "hipq.schemas",
    "Hipq": "hipq.service",
    "HipqError": "hipq.errors",
    "Job": "hipq.jobs",
    "JobNotFound": "hipq.errors",
    "JobState": "hipq.jobs",
    "QueueConfig": "hipq.config",
    "QueueNotFound": "hipq.errors",
    "ReconcileResult": "hipq.reconciler",
    "Reconciler": "hipq.reconciler",
    "ResponseRequest": "hipq.schemas",
    "SQLStore": "hipq.store",
    "Settings": "hipq.config",
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
    "SQLStore",
    "Settings",
    "load_config",
    "open_store",
]


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'hipq' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

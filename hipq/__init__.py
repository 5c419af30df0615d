"""hipq: a durable job scheduler daemon for work that talks to external services."""

from hipq.config import QueueConfig, Settings, load_config
from hipq.daemon import Daemon
from hipq.errors import ConfigError, ConflictError, HipqError, JobNotFound, QueueNotFound
from hipq.jobs import Job, JobState
from hipq.reconciler import Reconciler, ReconcileResult
from hipq.schemas import EnqueueRequest, ResponseRequest
from hipq.service import Hipq
from hipq.store import Store, open_store

__version__ = "0.1.0"

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
    "load_config",
    "open_store",
]

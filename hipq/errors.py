"""The exceptions hipq raises.

    HipqError
    ├── ConfigError            bad YAML, bad key, bad plugin path (carries the path)
    ├── StoreError             the database
    │   ├── TransientStoreError   connection lost, timeout: try again
    │   ├── StoreConflict         a constraint (a unique key) refused a write
    │   └── SchemaError           the database is not migrated / too new
    ├── NotFound
    │   ├── QueueNotFound
    │   └── JobNotFound
    ├── ValidationError        a request that is well-formed but not acceptable
    ├── ConflictError          idempotency conflict (same id, different body)
    │   └── StaleResponse      a response for an attempt that is not the live one
    ├── LaunchError            a target could not launch a job
    │   └── TransientLaunchError
    └── hipq.client.ApiStatusError  the HTTP API answered the client with a non-2xx

Adapters translate driver exceptions at their boundary; the core never catches
``asyncpg`` or ``sqlite3`` errors itself.
"""

from __future__ import annotations


class HipqError(Exception):
    """Root of every error hipq raises on purpose."""

    code = "error"


class ConfigError(HipqError):
    code = "config_error"


class StoreError(HipqError):
    code = "store_error"


class TransientStoreError(StoreError):
    code = "store_unavailable"


class SchemaError(StoreError):
    code = "schema_error"


class StoreConflict(StoreError):
    """A constraint of the database refused a write (e.g. a unique key)."""

    code = "store_conflict"


class NotFound(HipqError):
    code = "not_found"


class QueueNotFound(NotFound):
    code = "queue_not_found"

    def __init__(self, queue: str) -> None:
        super().__init__(f"queue {queue!r} does not exist")
        self.queue = queue


class JobNotFound(NotFound):
    code = "job_not_found"

    def __init__(self, queue: str, job_id: str) -> None:
        super().__init__(f"job {job_id!r} does not exist in queue {queue!r}")
        self.queue = queue
        self.job_id = job_id


class ValidationError(HipqError):
    code = "invalid"


class ConflictError(HipqError):
    code = "conflict"

    def __init__(self, message: str, *, queue: str = "", job_id: str = "") -> None:
        super().__init__(message)
        self.queue = queue
        self.job_id = job_id


class StaleResponse(ConflictError):
    code = "stale_response"


class LaunchError(HipqError):
    """A target failed to launch a job; ``retryable`` says whether to try again."""

    code = "launch_error"
    retryable = False
    kind = "transport"

    def __init__(self, message: str, *, kind: str = "transport") -> None:
        super().__init__(message)
        self.kind = kind


class TransientLaunchError(LaunchError):
    retryable = True

"""The schema: its version, the migrations that make it, and its tables as
SQLAlchemy metadata.

The version and the migration files (:mod:`hipq.store.versions`) are plain text and
load nothing more. The tables (:mod:`hipq.store.tables`: ``s.jobs``, ``s.JSON``,
``s.metadata``, ...) are SQLAlchemy metadata, imported on first use (PEP 562): the
SQLite driver and tools build statements on them, while the PostgreSQL driver
runs named SQL on asyncpg and never loads SQLAlchemy (about 23 MB of a daemon's
memory; docs/operations.md).

``python -m hipq.store.schema > schema.sql`` renders the canonical PostgreSQL DDL.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hipq.store.versions import SCHEMA_VERSION, Migration, enqueue_function, migrations, pending

if TYPE_CHECKING:
    from hipq.store.tables import (
        JSON,
        QUEUED,
        RUNNING,
        UNMATCHED,
        BigId,
        UTCDateTime,
        archived_jobs,
        daemons,
        job_attempts,
        job_intake,
        jobs,
        launch_events,
        leases,
        merged_jobs,
        meta,
        metadata,
        partner_minutes,
        partner_state,
        queue_backoffs,
        queue_state,
        queues,
        render_postgres_ddl,
        response_inbox,
    )

__all__ = [
    "JSON",
    "QUEUED",
    "RUNNING",
    "SCHEMA_VERSION",
    "UNMATCHED",
    "BigId",
    "Migration",
    "UTCDateTime",
    "archived_jobs",
    "daemons",
    "enqueue_function",
    "job_attempts",
    "job_intake",
    "jobs",
    "launch_events",
    "leases",
    "merged_jobs",
    "meta",
    "metadata",
    "migrations",
    "partner_minutes",
    "partner_state",
    "pending",
    "queue_backoffs",
    "queue_state",
    "queues",
    "render_postgres_ddl",
    "response_inbox",
]
# the names of hipq.store.tables (SQLAlchemy), loaded on first use
_TABLES = frozenset(__all__) - {"SCHEMA_VERSION", "Migration", "enqueue_function", "migrations",
                                "pending"}


def __getattr__(name: str) -> Any:
    if name not in _TABLES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("hipq.store.tables"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_TABLES})


if __name__ == "__main__":
    import sys

    sys.stdout.write(__getattr__("render_postgres_ddl")())

"""Storage: one schema, one SQL store for PostgreSQL and SQLite."""

from hipq.store.records import (
    Change,
    ChangeKind,
    InboxOutcome,
    InboxRow,
    InsertOutcome,
    InsertStatus,
    QueueRecord,
    QueueStats,
    Response,
)
from hipq.store.sql import SQLStore, normalize_url, open_store

Store = SQLStore

__all__ = [
    "Change",
    "ChangeKind",
    "InboxOutcome",
    "InboxRow",
    "InsertOutcome",
    "InsertStatus",
    "QueueRecord",
    "QueueStats",
    "Response",
    "SQLStore",
    "Store",
    "normalize_url",
    "open_store",
]

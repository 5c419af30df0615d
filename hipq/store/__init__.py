"""Storage: the :class:`Store` protocol, one driver per database behind it
(:mod:`hipq.store.sqlite`, :mod:`hipq.store.postgres`), and :func:`open_store`,
which picks the driver from the database URL."""

from hipq.store.base import Store
from hipq.store.factory import normalize_url, open_store
from hipq.store.records import (
    Change,
    ChangeKind,
    InboxOutcome,
    InboxRow,
    InsertOutcome,
    InsertStatus,
    JobHistory,
    ListedResponse,
    QueueRecord,
    QueueStats,
    Response,
)

__all__ = [
    "Change",
    "ChangeKind",
    "InboxOutcome",
    "InboxRow",
    "InsertOutcome",
    "InsertStatus",
    "JobHistory",
    "ListedResponse",
    "QueueRecord",
    "QueueStats",
    "Response",
    "Store",
    "normalize_url",
    "open_store",
]

"""Storage: the :class:`Store` protocol, one driver per database behind it
(:mod:`hipq.store.sqlite`, :mod:`hipq.store.postgres`), and :func:`open_store`,
which picks the driver from the database URL.

The names below are imported on first use (PEP 562): importing the protocol
(``hipq.store.base``) or the records (``hipq.store.records``) loads no driver and
no SQLAlchemy; ``open_store`` does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hipq.store.base import Store
    from hipq.store.factory import normalize_url, open_store
    from hipq.store.records import (
        Change,
        ChangeKind,
        InboxOutcome,
        InboxPage,
        InboxRow,
        InsertOutcome,
        InsertStatus,
        JobHistory,
        ListedResponse,
        QueueRecord,
        QueueStats,
        Response,
    )

_RECORDS = ("Change", "ChangeKind", "InboxOutcome", "InboxPage", "InboxRow", "InsertOutcome",
            "InsertStatus", "JobHistory", "ListedResponse", "QueueRecord", "QueueStats",
            "Response")
_WHERE = {
    "Store": "hipq.store.base",
    "normalize_url": "hipq.store.factory",
    "open_store": "hipq.store.factory",
    **dict.fromkeys(_RECORDS, "hipq.store.records"),
}

__all__ = [
    "Change",
    "ChangeKind",
    "InboxOutcome",
    "InboxPage",
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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

"""The engine: the reconcile loop and the parts it coordinates.

``reconciler`` (one tick: steps 0-5) over ``leases`` (ownership, adoption),
``inbox`` (responses), ``decide`` (pure decisions), ``runtimes`` (what queue
settings build), ``throttle`` (the built-in throttler or a plugin), ``launcher``
(step 5) and ``maintenance`` (vacuum); ``batch`` holds the in-memory state.

The names below are imported on first use (PEP 562): importing a pure part
(``decide``, ``batch``, ``held``, ``result``, ``driver``) loads neither the
reconciler nor the database, HTTP or configuration libraries behind it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hipq.engine.reconciler import Reconciler
    from hipq.engine.result import ReconcileResult

_WHERE = {"ReconcileResult": "hipq.engine.result", "Reconciler": "hipq.engine.reconciler"}

__all__ = ["ReconcileResult", "Reconciler"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

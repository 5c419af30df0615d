"""The engine: the reconcile loop and the parts it coordinates (docs/internals.md,
"How it works").

``facade`` (:class:`~hipq.engine.facade.Engine`, what the daemon and the service see;
when ticks run) over ``reconciler`` (the state between ticks), ``plan`` (one tick,
steps 0-5, as generators of ``requests``) and ``executor`` (the one part that awaits
the store: the stage table); the steps' parts ``selection``, ``fates``, ``claims``
and ``inline``; ``leases`` (ownership, adoption), ``inbox`` (responses), ``partner_word``
(the partner's word), ``decide`` (pure decisions), ``runtimes`` (what queue settings
build), ``throttle`` (the built-in throttler or a plugin), ``launcher`` (step 5) and
``maintenance`` (vacuum); ``batch`` holds the in-memory state.

The names below are imported on first use (PEP 562): importing a pure part
(``decide``, ``batch``, ``held``, ``result``, ``tick_driver``, ``requests``) loads neither
the reconciler nor the database, HTTP or configuration libraries behind it.
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

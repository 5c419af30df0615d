"""The engine: the reconcile loop and the parts it coordinates.

``reconciler`` (one tick: steps 0-5) over ``leases`` (ownership, adoption),
``inbox`` (responses), ``decide`` (pure decisions), ``runtimes`` (what queue
settings build), ``throttle`` (the built-in throttler or a plugin), ``launcher``
(step 5) and ``maintenance`` (vacuum); ``batch`` holds the in-memory state.
"""

from hipq.engine.reconciler import Reconciler
from hipq.engine.result import ReconcileResult

__all__ = ["ReconcileResult", "Reconciler"]

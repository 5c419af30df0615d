"""One structured log line per failed try and per job that gives up (docs/operations.md),
written by the daemon after each tick from the changes the tick persisted (so the
reconcile loop itself does no logging work per job).

Each line has ``action`` (``try_failed`` or ``job_gave_up``), ``queue``, ``job_id``,
``attempt``, ``error_kind`` and ``detail`` (at most ``DETAIL_CHARS``), and for a job
with a trace ``trace_id`` (also at the end of the text message: docs/traces.md); never
the job's data or result. Tracebacks stay on the try, not in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from hipq.store import Change, ChangeKind

log = logging.getLogger("hipq.jobs")

DETAIL_CHARS = 300


def log_failures(ended: Iterable[Change]) -> None:
    for change in ended:
        if change.kind is ChangeKind.REQUEUE:
            _line(change, "try_failed", "job %s/%s try %d failed (%s: %s); retry at %s%s",
                  change.run_at.isoformat() if change.run_at else "-")
        elif change.kind is ChangeKind.ARCHIVE and change.status == "failed":
            reason = (change.error or {}).get("gave_up", "")
            _line(change, "job_gave_up", "job %s/%s gave up after try %d (%s: %s): %s%s",
                  str(reason)[:DETAIL_CHARS])


def _line(change: Change, action: str, message: str, tail: str) -> None:
    error = change.error or {}
    kind = str(error.get("kind") or change.outcome or "")
    detail = str(error.get("detail") or "")[:DETAIL_CHARS]
    level = logging.WARNING if action == "try_failed" else logging.ERROR
    extra = {"action": action, "queue": change.queue, "job_id": change.id,
             "attempt": change.attempt, "error_kind": kind, "detail": detail}
    trace = ""
    if change.trace is not None:
        extra["trace_id"] = change.trace[3:35]
        trace = f" (trace {extra['trace_id']})"
    log.log(level, message, change.queue, change.id, change.attempt, kind, detail, tail, trace,
            extra=extra)

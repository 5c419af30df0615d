"""Step 3's decisions (:mod:`hipq.engine.plan`): what becomes of the tries that ended
or were extended, decided over copies, with no I/O.

Jobs are frozen; the mutable parts of a held try are copied by
:func:`~hipq.engine.decide.change_for`, and retry plugins get deep copies. An ended
try also tells the partner's word (:mod:`hipq.engine.partner_word`, docs/throttling.md)
what it learned: a success may end its scope's streak and grows the adaptive limit,
a timeout lowers it, a throttled try pauses its scope (its job comes back when the
pause ends).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hipq.engine.decide import change_for, may_pause, may_slow_down, throttled_in_a_row
from hipq.engine.held import HeldTry, Outcome
from hipq.engine.result import Counters
from hipq.engine.selection import scope
from hipq.errors import HipqError
from hipq.jobs import ErrorKind, JobState
from hipq.retry import RetryFn
from hipq.spec import QueueSpec
from hipq.store.records import Change, ChangeKind, QueueRecord

if TYPE_CHECKING:
    from hipq.engine.reconciler import Reconciler


def changes(engine: Reconciler, changed: Sequence[HeldTry], queues: Mapping[str, QueueRecord],
            now: datetime, counters: Counters) -> list[Change]:
    """The :class:`Change` of each try in ``changed``, with the retry strategy's
    verdict; counts what finished, was retried, was throttled."""
    out = []
    strategies: dict[str, tuple[QueueSpec | None, RetryFn | None]] = {}  # per queue
    listening: dict[str, bool] = {}  # per queue: a success tells the partner's word
    finished = retried = throttled = 0
    succeeded = JobState.SUCCEEDED
    partner = engine.partner
    budgets = engine.budgets
    for held in changed:
        queue = held.queue
        if held.outcome is not None:  # its partner's weight is free, its cost settled
            budgets.ended(queue, held.id, _reported(held.outcome))
        strategy = strategies.get(queue)
        if strategy is None:
            strategy = strategies[queue] = _retry_of(engine, queues.get(queue))
            spec = strategy[0]
            listening[queue] = spec is not None and (
                spec.adaptive is not None or partner.has_pauses(queue))
        paused_until = None
        outcome = held.outcome
        if listening[queue] or (outcome is not None and outcome.status is not succeeded):
            paused_until = _partner_heard(engine, held, strategy[0], now)
            if paused_until is not None:
                throttled += 1
                listening[queue] = True  # it has a pause now: later successes end its row
        change = change_for(held, strategy[0], strategy[1], now, paused_until=paused_until)
        if change.kind is ChangeKind.ARCHIVE:
            finished += 1
        elif change.kind is ChangeKind.REQUEUE:
            retried += 1
        out.append(change)
    counters.add("finished", finished)
    counters.add("retried", retried)
    counters.add("throttled", throttled)
    return out


def _partner_heard(engine: Reconciler, held: HeldTry, spec: QueueSpec | None,
                   now: datetime) -> datetime | None:
    """What an ended try tells of the partner: a success may end its scope's streak
    and grows the adaptive limit; a timeout lowers it; a throttled try pauses its
    scope (returns when the pause ends), or, reported by a producer rather than the
    partner, only its own job waits (returns until when)."""
    outcome = held.outcome
    if spec is None or outcome is None or held.queue not in engine.held:
        return None
    partner = engine.partner
    if outcome.status is JobState.SUCCEEDED:  # only where the queue listens (changes)
        partner.succeeded(spec, held.scope if held.job is None else scope(spec, held.job), now)
        return None
    error = outcome.error
    if error is None:
        return None
    if error.kind == ErrorKind.TIMEOUT:
        if may_slow_down(error):  # not a producer's "failed" of kind timeout
            partner.slow_down(spec, held.launched_at, now)
        return None
    if error.kind != ErrorKind.THROTTLED:
        return None
    data = error.data if isinstance(error.data, dict) else {}
    if not may_pause(error):  # a producer's word: its own try only (docs/throttling.md)
        return partner.given_back(spec, data.get("retry_after"),
                                  throttled_in_a_row(held.job) + 1, now)
    held_scope = held.scope if held.job is None else scope(spec, held.job)
    return partner.throttled(spec, held_scope, held.launched_at, data.get("retry_after"),
                             error.detail or "throttled", now, job=held.job)


def _reported(outcome: Outcome) -> Any:
    """Where an ended try's response reports its usage: its result, else its error's
    data."""
    if outcome.error is not None:
        return outcome.error.data
    return outcome.result


def _retry_of(engine: Reconciler,
              record: QueueRecord | None) -> tuple[QueueSpec | None, RetryFn | None]:
    """A queue's spec and retry strategy (None where they cannot be had)."""
    if record is None:
        return None, None
    try:  # built here when this tick's fetch has not built it yet
        runtime = engine.runtimes.get(record)
    except HipqError:
        return record.spec, None
    return runtime.spec, runtime.retry

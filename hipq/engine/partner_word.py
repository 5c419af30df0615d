"""The partner's word (docs/throttling.md): what the owner of a queue learned from the partner
it launches to, kept in memory for the tick and in the database for every daemon.

Per held queue:

* **pauses**, one per scope (the whole queue, or one group: the value at
  ``backoff.field``): a throttled try the partner reported (its answer to the
  launch, the try's signed callback, a Kafka response: ``decide.may_pause``) pauses
  its scope until the time the partner gave (never sooner than
  ``backoff.initial_seconds``, never later than ``backoff.max_partner_seconds``), else
  ``backoff.initial_seconds`` doubling per throttled try in a row of the
  scope (a *streak*), up to ``backoff.max_seconds``; a success that says the
  budget is spent pauses it until the reset. A try counts in the streak only if it
  was launched after the scope's pause began (strictly): the tries already in flight
  when the partner first said "not now" say it again without doubling anything. A
  success of the scope ends the row (the pause in force stands; a passed one goes).
  A throttled try a producer reported with its API token pauses nothing: its job
  alone waits (:meth:`PartnerWord.given_back`).
* **the adaptive limit** (``adaptive``): AIMD on the effective concurrency. A
  throttled or timed-out try multiplies it by ``decrease`` (not below ``min``),
  once per round: only a try launched after the last decrease lowers it again (the
  burst of refusals of one round counts once, as TCP decreases once per round
  trip); ``increase_every`` successes add one, never above ``concurrency``.
* **the learned rate** (``backoff.learn``, the default, for a queue-wide scope): a
  refusal that gives no time (a bare 429) pauses nothing and does not double; it
  lowers the queue's launch rate (CUBIC, :mod:`hipq.partners.learning`, once per
  round), which then climbs back and probes above; launches are paced at that rate
  in small groups (:class:`~hipq.partners.learning.Pacer`), the engine waking for
  the next group. The refused try's job is due again at once: the pace holds it.
* **held counts**: the due jobs the last tick held back, by reason.

Loaded when a queue is gained or its record changes (a resume clears its pauses in
the database and touches the record); written when they change (held counts at
most once a second). Everything here is O(what the tick looked at).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from hipq.engine.budgets import Budgets
from hipq.engine.requests import Plan, call
from hipq.jobs import Job
from hipq.partners.learning import CubicRate, LaunchRate, Pacer
from hipq.pause_scope import group_of
from hipq.retry import partner_time
from hipq.spec import QueueSpec
from hipq.store.records import Backoff, QueueRecord, QueueState

BUDGET_SPENT = "budget spent"
HELD_SAVE_EVERY = timedelta(seconds=1)  # held counts are written at most this often
FORGET_AFTER = timedelta(minutes=10)  # a passed pause's streak is forgotten after this
MAX_SCOPES = 10_000  # pauses kept per queue (group scopes): the oldest passed ones go


def effective_limit(concurrency: int | None, adaptive_min: int | None,
                    learned: float | None) -> int | None:
    """The concurrency in force (docs/throttling.md): the adaptive limit ``learned`` in whole
    units, kept between ``adaptive_min`` and ``concurrency``; the configured
    ``concurrency`` when the queue does not adapt (``adaptive_min`` None) or nothing
    was learned yet. Pure: the API and the metrics show what the owner enforces."""
    if concurrency is None or adaptive_min is None or learned is None:
        return concurrency
    return max(adaptive_min, min(concurrency, math.floor(learned + 1e-9)))


def learned_rate(state: QueueState, now: datetime) -> float | None:
    """The launch rate a queue's owner learned, as stored, at ``now`` (None: no learned
    limit). Pure: the API and the metrics show what the owner enforces."""
    return CubicRate(w_max=state.learned_rate, since=state.learned_since).rate(now)


def _time_given(spec: QueueSpec, given: Any, streak: int, now: datetime) -> datetime:
    """When a throttled try's scope (or job) may launch again: the time ``given``
    (:func:`hipq.retry.partner_time`: seconds or an aware ISO time), at most
    ``backoff.max_partner_seconds`` away; without one, ``backoff.initial_seconds``
    doubling per throttled try in a row (``streak``) up to ``backoff.max_seconds``.
    Never sooner than the initial back-off: "Retry-After: 0" is no hot loop."""
    backoff = spec.backoff
    until = partner_time(given, now, cap=backoff.max_partner_seconds)
    if until is None:
        seconds = min(backoff.initial_seconds * 2.0 ** min(max(streak - 1, 0), 60),
                      backoff.max_seconds)
        return now + timedelta(seconds=seconds)
    return max(until, now + timedelta(seconds=backoff.initial_seconds))


class PartnerWord:
    def __init__(self, budgets: Budgets | None = None) -> None:
        self.budgets = budgets or Budgets()  # declared partners (hipq.engine.budgets)
        self._pauses: dict[str, dict[str | None, Backoff]] = {}
        self._states: dict[str, QueueState] = {}
        self._loaded: dict[str, datetime] = {}  # queue -> its record's updated_at
        self._dirty_pauses: set[str] = set()
        self._dirty_states: set[str] = set()
        self._held_saved: dict[str, datetime] = {}
        self._held_pending: set[str] = set()
        self._counted: dict[str, datetime] = {}  # queue -> last count of held jobs
        self._learned: dict[str, CubicRate] = {}  # queue -> its learned launch rate
        self._measured: dict[str, LaunchRate] = {}  # queue -> its recent launches
        self._pacers: dict[str, Pacer] = {}
        self._paced: set[str] = set()  # queues whose due jobs wait for the pace
        self._budgets_kept: datetime | None = None

    # -- loading and saving ----------------------------------------------------------

    def refresh(self, held: Collection[str], queues: Mapping[str, QueueRecord],
                now: datetime | None = None) -> Plan[None]:
        """Forget queues no longer held; load those gained or whose record changed (a
        plan: :mod:`hipq.engine.requests`)."""
        for queue in [q for q in self._loaded if q not in held]:
            self.forget(queue)
        stale = [q for q in sorted(held)
                 if q in queues and self._loaded.get(q) != queues[q].updated_at]
        if not stale:
            return
        pauses = yield call("backoff_list", queues=stale)
        states = yield call("queue_state_list", queues=stale)
        for queue in stale:
            self._loaded[queue] = queues[queue].updated_at
            self._pauses[queue] = {}
            state = self._states[queue] = states.get(queue) or QueueState(queue=queue)
            learned = CubicRate(w_max=state.learned_rate, since=state.learned_since)
            partner = queues[queue].spec.partner
            if partner is not None and partner in self.budgets.partners:
                if state.budget is not None and now is not None \
                        and self.budgets.fresh(partner):  # an earlier owner's buckets
                    self.budgets.restore(partner, state.budget, now)
                self.budgets.seed(partner, learned)  # the partner's, stored with its queues
            else:
                self._learned[queue] = learned
            self._dirty_pauses.discard(queue)
            self._dirty_states.discard(queue)
        for pause in pauses:
            self._pauses[pause.queue][pause.group] = pause

    def forget(self, queue: str) -> None:
        for table in (self._pauses, self._states, self._loaded, self._held_saved,
                      self._counted, self._learned, self._measured, self._pacers):
            table.pop(queue, None)
        for marks in (self._dirty_pauses, self._dirty_states, self._held_pending,
                      self._paced):
            marks.discard(queue)

    def keep_budgets(self, now: datetime, *, force: bool = False) -> None:
        """Each partner's buckets, written with its first queue's state at most once a
        second (at once with ``force``: a handover), for the next owner."""
        if not force and self._budgets_kept is not None \
                and now - self._budgets_kept < HELD_SAVE_EVERY:
            return
        self._budgets_kept = now
        for partner_id, queue in self.budgets.leads().items():
            if queue in self._states or queue in self._loaded:
                state = self._state(queue)
                state.budget = self.budgets.export(partner_id, now)
                self._dirty_states.add(queue)

    def save(self, now: datetime) -> Plan[None]:
        """Write what changed: pauses of a queue whole, states in one statement."""
        for queue in sorted(self._dirty_pauses):
            pauses = self._pauses.get(queue)
            if pauses is None:
                continue
            self._prune(pauses, now)
            yield call("backoff_replace", queue=queue, backoffs=list(pauses.values()))
        self._dirty_pauses.clear()
        for queue in list(self._held_pending):
            if now - self._held_saved.get(queue, datetime.min.replace(tzinfo=now.tzinfo)) \
                    >= HELD_SAVE_EVERY:
                self._held_pending.discard(queue)
                self._held_saved[queue] = now
                self._dirty_states.add(queue)
        states = [self._states[q] for q in sorted(self._dirty_states) if q in self._states]
        self._dirty_states.clear()
        yield call("queue_state_save", states)

    @staticmethod
    def _prune(pauses: dict[str | None, Backoff], now: datetime) -> None:
        for key in [k for k, b in pauses.items() if b.until < now - FORGET_AFTER]:
            del pauses[key]
        if len(pauses) > MAX_SCOPES:
            for key in sorted(pauses, key=lambda k: pauses[k].until)[:len(pauses) - MAX_SCOPES]:
                del pauses[key]

    def _state(self, queue: str) -> QueueState:
        state = self._states.get(queue)
        if state is None:
            state = self._states[queue] = QueueState(queue=queue)
        return state

    # -- pauses --------------------------------------------------------------------------

    @staticmethod
    def scope_of(spec: QueueSpec, value: str | None) -> str | None:
        """The scope a job's try belongs to: None (the queue) or its group: the value
        in its bounded, exact form (:func:`hipq.pause_scope.group_of`)."""
        if spec.backoff.scope != "group":
            return None
        return group_of("" if value is None else value)

    def queue_pause(self, queue: str, now: datetime) -> Backoff | None:
        """The queue-wide pause in force, if any."""
        pauses = self._pauses.get(queue)
        pause = None if not pauses else pauses.get(None)
        return pause if pause is not None and pause.until > now else None

    def group_pauses(self, queue: str, now: datetime) -> dict[str, Backoff]:
        """The group pauses in force, by value."""
        pauses = self._pauses.get(queue)
        if not pauses:
            return {}
        return {k: b for k, b in pauses.items() if k is not None and b.until > now}

    def has_pauses(self, queue: str) -> bool:
        """Whether the queue has pauses (in force, or passed with their streak)."""
        return bool(self._pauses.get(queue))

    def may_count(self, queue: str, now: datetime) -> bool:
        """Whether a count of held jobs is due (at most once a second per queue)."""
        last = self._counted.get(queue)
        if last is not None and now - last < HELD_SAVE_EVERY:
            return False
        self._counted[queue] = now
        return True

    def active(self, queue: str, now: datetime) -> list[Backoff]:
        pauses = self._pauses.get(queue)
        return [] if not pauses else [b for b in pauses.values() if b.until > now]

    def next_end(self, queues: Collection[str], now: datetime) -> datetime | None:
        """The earliest end of a pause in force (a tick is due then)."""
        ends = [b.until for q in queues for b in self._pauses.get(q, {}).values()
                if b.until > now]
        return min(ends) if ends else None

    def throttled(self, spec: QueueSpec, scope: str | None, launched_at: datetime | None,
                  partner: Any, reason: str, now: datetime, job: Job | None = None) -> datetime:
        """A throttled try of ``scope``: pause it; the time the pause ends. A refusal
        that gives no time, of a queue that learns, pauses nothing: it lowers the
        learned rate (once a round) and its job is due again ``now``."""
        if self.learns(spec) and partner_time(
                partner, now, cap=spec.backoff.max_partner_seconds) is None:
            self._refused(spec, launched_at, now, job)
            self.slow_down(spec, launched_at, now)
            return now
        until = self._pause(spec, scope, launched_at, partner, reason, now)
        self.budgets.heard(spec, job)
        for sibling in self.budgets.siblings(spec):  # a partner's pause holds all its queues
            self._pause(replace(spec, id=sibling), scope, launched_at, partner, reason, now)
        state = self._state(spec.id)
        state.throttled_total += 1
        self._dirty_states.add(spec.id)
        self.slow_down(spec, launched_at, now)
        return until

    def _pause(self, spec: QueueSpec, scope: str | None, launched_at: datetime | None,
               partner: Any, reason: str, now: datetime) -> datetime:
        pauses = self._pauses.setdefault(spec.id, {})
        old = pauses.get(scope)
        new_round = old is None or launched_at is None or launched_at > old.since
        streak = (1 if old is None else old.streak + 1) if new_round else old.streak  # type: ignore[union-attr]
        until = _time_given(spec, partner, streak, now)
        if old is not None and old.until > until:
            until = old.until
        since = now if new_round or old is None else old.since
        pauses[scope] = Backoff(queue=spec.id, group=scope, until=until, reason=reason,
                                streak=max(streak, 1), since=since)
        self._dirty_pauses.add(spec.id)
        return until

    def given_back(self, spec: QueueSpec, given: Any, in_a_row: int,
                   now: datetime) -> datetime:
        """A throttled try a producer reported with its API token, not the partner
        (docs/throttling.md, "Who may pause, and for how long"): when its job alone
        may launch again. The time ``given`` is capped as a partner's is; without one,
        ``backoff.initial_seconds`` doubling per throttled try of the job in a row
        (``in_a_row``). No scope is paused, the adaptive limit is left alone: a
        producer names its own job's group, so its word could stop other tenants."""
        state = self._state(spec.id)
        state.throttled_total += 1
        self._dirty_states.add(spec.id)
        return _time_given(spec, given, in_a_row, now)

    def spent(self, spec: QueueSpec, scope: str | None, partner: Any, now: datetime) -> None:
        """A success that says the budget is spent until the reset: pause till then
        (at most ``backoff.max_partner_seconds`` away)."""
        until = partner_time(partner, now, cap=spec.backoff.max_partner_seconds)
        if until is None or until <= now:
            return
        pauses = self._pauses.setdefault(spec.id, {})
        old = pauses.get(scope)
        if old is not None and old.until >= until:
            return
        pauses[scope] = Backoff(queue=spec.id, group=scope, until=until, reason=BUDGET_SPENT,
                                streak=0 if old is None else old.streak, since=now)
        self._dirty_pauses.add(spec.id)

    def succeeded(self, spec: QueueSpec, scope: str | None, now: datetime) -> None:
        """A try of ``scope`` succeeded: a passed pause's streak ends; AIMD grows."""
        pauses = self._pauses.get(spec.id)
        if pauses:
            old = pauses.get(scope)
            if old is not None and old.until <= now:
                del pauses[scope]
                self._dirty_pauses.add(spec.id)
            elif old is not None and old.streak:  # the row is broken; the pause stands
                pauses[scope] = replace(old, streak=0)
                self._dirty_pauses.add(spec.id)
        adaptive, concurrency = spec.adaptive, spec.concurrency
        if adaptive is None or concurrency is None:
            return
        state = self._state(spec.id)
        if state.effective is None or state.effective >= concurrency:
            return
        state.successes += 1
        if state.successes >= adaptive.increase_every:
            state.effective = min(float(concurrency), state.effective + 1.0)
            state.successes = 0
        self._dirty_states.add(spec.id)

    def slow_down(self, spec: QueueSpec, launched_at: datetime | None, now: datetime) -> None:
        """A throttled or timed-out try: the adaptive limit decreases, once a round."""
        adaptive, concurrency = spec.adaptive, spec.concurrency
        if adaptive is None or concurrency is None:
            return
        state = self._state(spec.id)
        if state.decreased_at is not None and (launched_at is None
                                               or launched_at <= state.decreased_at):
            return  # launched before the last decrease: that round already counted
        current = float(concurrency) if state.effective is None else state.effective
        state.effective = max(float(adaptive.min), min(current, concurrency) * adaptive.decrease)
        state.successes = 0
        state.decreased_at = now
        self._dirty_states.add(spec.id)

    # -- the learned rate ------------------------------------------------------------------

    @staticmethod
    def learns(spec: QueueSpec) -> bool:
        """Whether a refusal without a time teaches the queue its rate (the default;
        group scopes keep the doubling pause per group)."""
        return spec.backoff.learn and spec.backoff.scope == "queue"

    def _refused(self, spec: QueueSpec, launched_at: datetime | None, now: datetime,
                 job: Job | None) -> None:
        queue = spec.id
        state = self._state(queue)
        state.throttled_total += 1
        self._dirty_states.add(queue)
        if self.budgets.refused(spec, job, launched_at, now):  # a declared partner's rate
            if spec.partner is not None and (acct := self.budgets.whole(spec.partner)):
                state.learned_rate, state.learned_since = acct.w_max, acct.since
            return
        learned = self._learned.setdefault(queue, CubicRate())
        measured = self._measured.get(queue)
        if learned.refused(now, launched_at=launched_at or now,
                           measured=0.0 if measured is None else measured.per_second(now)):
            state.learned_rate, state.learned_since = learned.w_max, learned.since

    def learned_rate(self, queue: str, now: datetime) -> float | None:
        """Launches a second the queue may make now; None: no learned limit (a
        learned rate the curve has climbed far past is forgotten here)."""
        learned = self._learned.get(queue)
        if learned is None or learned.w_max is None:
            return None
        rate = learned.rate(now)
        if rate is None:
            learned.forget_if_stale(now)
            state = self._state(queue)
            state.learned_rate = state.learned_since = None
            self._dirty_states.add(queue)
        return rate

    def launched(self, queue: str, count: int, now: datetime) -> None:
        """``count`` tries of the queue were claimed ``now`` (the measured rate)."""
        measured = self._measured.get(queue)
        if measured is None:
            measured = self._measured[queue] = LaunchRate()
        measured.launched(now, count)

    def pace(self, queue: str, launch: list[str], now: datetime) -> list[str]:
        """The chosen launches the learned rate allows now (the rest wait for the next
        group, reason ``partner``)."""
        self._paced.discard(queue)
        rate = self.learned_rate(queue, now)
        if rate is None or not launch:
            return launch
        pacer = self._pacers.get(queue)
        if pacer is None:
            pacer = self._pacers[queue] = Pacer()
        allowed = pacer.allow(rate, now, len(launch))
        if allowed < len(launch):
            self._paced.add(queue)
        return launch[:allowed]

    def next_group(self, now: datetime) -> datetime | None:
        """When the paced queues may launch their next group (a tick is due then)."""
        times = []
        for queue in self._paced:
            rate = self.learned_rate(queue, now)
            pacer = self._pacers.get(queue)
            if rate is not None and pacer is not None:
                times.append(pacer.next_at(rate, now))
        return min(times) if times else None

    # -- the adaptive limit ----------------------------------------------------------------

    def effective(self, spec: QueueSpec) -> int | None:
        """The concurrency in force: the adaptive limit (whole units), else the
        configured one."""
        state = self._states.get(spec.id)
        return effective_limit(spec.concurrency,
                               None if spec.adaptive is None else spec.adaptive.min,
                               None if state is None else state.effective)

    def in_force(self, spec: QueueSpec) -> QueueSpec:
        """``spec`` with the adaptive limit as its concurrency (the same object when
        nothing adapts)."""
        effective = self.effective(spec)
        if effective == spec.concurrency:
            return spec
        return replace(spec, concurrency=effective)

    # -- held counts -------------------------------------------------------------------------

    def held(self, queue: str, counts: dict[str, int]) -> None:
        """The due jobs the tick held back, by reason (written at most once a second)."""
        state = self._state(queue)
        if (state.held or {}) != counts:
            state.held = counts or None
            state.held_at = None
            self._held_pending.add(queue)

    def stamp_held(self, now: datetime) -> None:
        for queue in self._held_pending:
            state = self._states.get(queue)
            if state is not None and state.held_at is None:
                state.held_at = now

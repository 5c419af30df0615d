"""One try the batch holds (docs/internals.md, "The batch"): :class:`HeldTry`, and
:class:`Outcome`, how it ended in memory before step 3 persists it.

A held try is in one of three states, read off two fields:

* **waiting** (``outcome is None``, ``dirty`` False): launched, its response not
  in yet; it holds capacity and waits for its deadline;
* **extended** (``outcome is None``, ``dirty`` True): a heartbeat moved its
  deadline; step 3 persists the new one;
* **ended** (``outcome`` set, ``dirty`` True): a response, a launch's answer, a
  timeout or a cancel ended it; step 3 decides its fate and persists it, then it
  leaves the batch.

A record keeps what a tick reads (queue, id, attempt, token, launch time,
deadline, weight...). ``job`` is the whole job (its data) as claimed or adopted;
the batch lets it go once the try has waited through a tick, unless the queue
needs its jobs (see :mod:`hipq.engine.jobs_on_demand`).

Memory (docs/benchmarks.md, "Idle memory"): a daemon may hold 100,000 waiting
tries, most of them with no job, outcome, inbox ids, quota value, scope, trace
or ordering key. Those rarely set fields live in one :class:`_Rare` part, made
when one of them is set and dropped when all are back to their defaults, so a
plain waiting try is 12 slots (128 bytes instead of 192). They read and write as
attributes all the same. Once a try waits in a large batch, the batch keeps its
token (32 hex digits, as hipq makes them) as a number (``token_key``: 48 bytes
instead of 96, see :func:`token_number`); ``token`` still reads as the string.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hipq.frozen import quick_init
from hipq.jobs import GENERATED_KEY_PREFIX, Job, JobError, JobState, generated_key


@quick_init
@dataclass(frozen=True, slots=True)
class Outcome:
    """How a try ended, as known in memory before it is persisted."""

    status: JobState  # SUCCEEDED, FAILED or CANCELLED
    result: Any = None
    error: JobError | None = None
    response: Any = None


def token_number(token: str) -> int | None:
    """``token`` as a number if it is 32 lowercase hex digits (with a letter among
    them, as all but one token in millions has), else None: one number stands for
    one token only."""
    if len(token) == 32 and token.isalnum() and token.islower() and "x" not in token:
        try:
            return int(token, 16)
        except ValueError:
            return None
    return None


class _Rare:
    """The rarely set fields of a :class:`HeldTry` (see the module docstring)."""

    __slots__ = ("dirty", "inbox_ids", "job", "ordering_key", "outcome", "scope", "trace",
                 "value")

    def __init__(self, job: Job | None = None, outcome: Outcome | None = None,
                 inbox_ids: tuple[int, ...] = ()) -> None:
        self.job = job
        self.outcome = outcome
        self.inbox_ids = inbox_ids
        self.ordering_key: str | None = None if job is None else job.ordering_key
        self.trace: str | None = None if job is None else job.trace
        self.value: str | None = None
        self.scope: str | None = None
        self.dirty = False

    def blank(self) -> bool:
        return (self.outcome is None and self.job is None and not self.dirty
                and not self.inbox_ids and self.value is None and self.scope is None
                and self.trace is None and self.ordering_key is None)


class HeldTry:
    """One try of one job that this daemon holds (see the module docstring).

    Its correlation key: ``own_key`` says it is hipq's own (``~token.attempt``, made
    again when asked, not kept); otherwise ``given_key`` is the key as the job has
    it (a producer's, a template's; None when the job has none).

    Besides its slots it reads and writes, as attributes: ``job`` (None once let
    go), ``outcome``, ``inbox_ids`` (responses applied in memory), ``dirty`` (ended
    or extended since last persisted: step 3 persists it), ``value`` (the quota
    field's value, kept by the batch), ``scope`` (its partner scope's group, for
    backoff scope ``group``), ``trace`` (its W3C trace context, for step 3's logs
    and spans) and ``ordering_key``.
    """

    __slots__ = ("_rare", "attempt", "critical", "deadline", "given_key", "id",
                 "launched_at", "own_key", "queue", "timeout_seconds", "token_key", "weight")

    def __init__(self, job: Job, deadline: datetime | None, outcome: Outcome | None = None,
                 inbox_ids: Iterable[int] = ()) -> None:
        self.queue = job.queue
        self.id = job.id
        self.attempt = job.attempt
        # the token as kept: the string, or its number (token_number) once the try
        # waits in a large batch; the batch indexes hipq's own keys by it
        self.token_key: str | int = job.token
        key = job.correlation_key
        self.own_key = key is not None and key == generated_key(job.token, job.attempt)
        self.given_key: str | None = None if self.own_key else key
        self.launched_at = job.launched_at
        self.deadline = deadline
        self.timeout_seconds = job.timeout_seconds
        self.weight = job.weight
        self.critical = job.critical
        self._rare: _Rare | None = _Rare(job, outcome, tuple(inbox_ids))

    # -- the rare fields: read and set as attributes, the part made or dropped -------

    @property
    def job(self) -> Job | None:
        rare = self._rare
        return None if rare is None else rare.job

    @job.setter
    def job(self, job: Job | None) -> None:
        rare = self._rare
        if rare is None:
            if job is None:
                return
            rare = self._rare = _Rare()
        rare.job = job
        if job is None and rare.blank():
            self._rare = None

    @property
    def outcome(self) -> Outcome | None:
        rare = self._rare
        return None if rare is None else rare.outcome

    @outcome.setter
    def outcome(self, outcome: Outcome | None) -> None:
        rare = self._rare
        if rare is None:
            if outcome is None:
                return
            rare = self._rare = _Rare()
        rare.outcome = outcome
        if outcome is None and rare.blank():
            self._rare = None

    @property
    def inbox_ids(self) -> tuple[int, ...]:
        rare = self._rare
        return () if rare is None else rare.inbox_ids

    @inbox_ids.setter
    def inbox_ids(self, inbox_ids: tuple[int, ...]) -> None:
        rare = self._rare
        if rare is None:
            if not inbox_ids:
                return
            rare = self._rare = _Rare()
        rare.inbox_ids = inbox_ids
        if not inbox_ids and rare.blank():
            self._rare = None

    @property
    def dirty(self) -> bool:
        rare = self._rare
        return rare is not None and rare.dirty

    @dirty.setter
    def dirty(self, dirty: bool) -> None:
        rare = self._rare
        if rare is None:
            if not dirty:
                return
            rare = self._rare = _Rare()
        rare.dirty = dirty
        if not dirty and rare.blank():
            self._rare = None

    @property
    def value(self) -> str | None:
        rare = self._rare
        return None if rare is None else rare.value

    @value.setter
    def value(self, value: str | None) -> None:
        rare = self._rare
        if rare is None:
            if value is None:
                return
            rare = self._rare = _Rare()
        rare.value = value
        if value is None and rare.blank():
            self._rare = None

    @property
    def scope(self) -> str | None:
        rare = self._rare
        return None if rare is None else rare.scope

    @scope.setter
    def scope(self, scope: str | None) -> None:
        rare = self._rare
        if rare is None:
            if scope is None:
                return
            rare = self._rare = _Rare()
        rare.scope = scope
        if scope is None and rare.blank():
            self._rare = None

    @property
    def trace(self) -> str | None:
        rare = self._rare
        return None if rare is None else rare.trace

    @trace.setter
    def trace(self, trace: str | None) -> None:
        rare = self._rare
        if rare is None:
            if trace is None:
                return
            rare = self._rare = _Rare()
        rare.trace = trace
        if trace is None and rare.blank():
            self._rare = None

    @property
    def ordering_key(self) -> str | None:
        rare = self._rare
        return None if rare is None else rare.ordering_key

    @ordering_key.setter
    def ordering_key(self, ordering_key: str | None) -> None:
        rare = self._rare
        if rare is None:
            if ordering_key is None:
                return
            rare = self._rare = _Rare()
        rare.ordering_key = ordering_key
        if ordering_key is None and rare.blank():
            self._rare = None

    # -- the token ------------------------------------------------------------------

    @property
    def token(self) -> str:
        token = self.token_key
        return token if isinstance(token, str) else f"{token:032x}"

    def compact_token(self) -> None:
        """Keep the token as its number if it has one (:func:`token_number`); ``token``
        reads the same. Only the batch calls it, with its index of keys in mind."""
        token = self.token_key
        if isinstance(token, str) and (number := token_number(token)) is not None:
            self.token_key = number

    # -- derived ---------------------------------------------------------------------

    @property
    def correlation_key(self) -> str | None:
        return generated_key(self.token, self.attempt) if self.own_key else self.given_key

    @property
    def fixed_key(self) -> bool:
        """A producer's correlation key (hipq's own keys are one a try)."""
        key = self.given_key
        return key is not None and not key.startswith(GENERATED_KEY_PREFIX)

    @property
    def waiting(self) -> bool:
        """Launched and not ended: it holds capacity."""
        rare = self._rare
        return rare is None or rare.outcome is None

    def __repr__(self) -> str:
        return (f"HeldTry({self.queue!r}, {self.id!r}, attempt={self.attempt}, "
                f"deadline={self.deadline!r}, outcome={self.outcome!r})")

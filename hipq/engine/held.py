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


class HeldTry:
    """One try of one job that this daemon holds (see the module docstring).

    Its correlation key: ``own_key`` says it is hipq's own (``~token.attempt``, made
    again when asked, not kept); otherwise ``given_key`` is the key as the job has
    it (a producer's, a template's; None when the job has none).
    """

    __slots__ = ("attempt", "critical", "deadline", "dirty", "given_key", "id", "inbox_ids",
                 "job", "launched_at", "ordering_key", "outcome", "own_key", "queue",
                 "scope", "timeout_seconds", "token", "trace", "value", "weight")

    def __init__(self, job: Job, deadline: datetime | None, outcome: Outcome | None = None,
                 inbox_ids: Iterable[int] = ()) -> None:
        self.queue = job.queue
        self.id = job.id
        self.attempt = job.attempt
        self.token = job.token
        key = job.correlation_key
        self.own_key = key is not None and key == generated_key(job.token, job.attempt)
        self.given_key: str | None = None if self.own_key else key
        self.launched_at = job.launched_at
        self.deadline = deadline
        self.timeout_seconds = job.timeout_seconds
        self.weight = job.weight
        self.critical = job.critical
        self.ordering_key = job.ordering_key
        self.trace = job.trace  # its W3C trace context, for step 3's logs and spans
        self.value: str | None = None  # the quota field's value (kept by the batch)
        self.scope: str | None = None  # its partner scope's group (backoff scope: group)
        self.job: Job | None = job
        self.outcome = outcome
        self.inbox_ids: tuple[int, ...] = tuple(inbox_ids)  # responses applied in memory
        self.dirty = False  # ended or extended since last persisted (step 3 persists it)

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
        return self.outcome is None

    def __repr__(self) -> str:
        return (f"HeldTry({self.queue!r}, {self.id!r}, attempt={self.attempt}, "
                f"deadline={self.deadline!r}, outcome={self.outcome!r})")

"""The target interface.

``launch(job)`` sends one job and answers:

* :class:`Accepted`: the target took the job; its outcome arrives later as a
  response (HTTP callback, Kafka message, the API);
* :class:`Completed`: the outcome is known at once (a Python function returned,
  a ``sync`` HTTP call answered);
* or raises :class:`~hipq.errors.LaunchError` (``retryable`` says whether to try
  again); any other exception is a retryable ``transport`` failure.

Either answer confirms the launch. A launch that never answered (the daemon died)
stays unconfirmed and is treated as ``lost`` by the next owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from hipq.frozen import quick_init
from hipq.jobs import Job


@dataclass(frozen=True, slots=True)
class Accepted:
    """The target has the job; the outcome comes later as a response.

    ``spent``: the partner said its budget is spent (``RateLimit-Remaining: 0``),
    until this time (seconds from now, or an aware ISO 8601 time): the scope pauses
    until then (docs/throttling.md). ``budget``: the answer's rate-limit headers
    (names lower-cased), which set the partner's buckets (docs/throttling.md,
    "Partners")."""

    spent: float | str | None = None
    budget: tuple[tuple[str, str], ...] = ()  # the answer's rate-limit headers


@quick_init
@dataclass(frozen=True, slots=True)
class Completed:
    """The outcome, known at once. ``status`` ``throttled`` is the partner's "not
    now" (its ``error`` may carry ``retry_after``); ``spent`` as on
    :class:`Accepted`."""

    status: str = "succeeded"  # succeeded | failed | throttled
    result: Any = None
    error: Any = None
    retryable: bool | None = None
    kind: str = "response_failed"
    spent: float | str | None = None
    budget: tuple[tuple[str, str], ...] = ()  # the answer's rate-limit headers


LaunchOutcome = Accepted | Completed
ACCEPTED = Accepted()


class Target(Protocol):

    async def launch(self, job: Job) -> LaunchOutcome: ...

    async def close(self) -> None: ...

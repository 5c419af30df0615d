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
    """The target has the job; the outcome comes later as a response."""


@quick_init
@dataclass(frozen=True, slots=True)
class Completed:
    status: str = "succeeded"  # succeeded | failed
    result: Any = None
    error: Any = None
    retryable: bool | None = None
    kind: str = "response_failed"


LaunchOutcome = Accepted | Completed
ACCEPTED = Accepted()


class Target(Protocol):

    async def launch(self, job: Job) -> LaunchOutcome: ...

    async def close(self) -> None: ...

"""Plain records the store takes and returns (no SQLAlchemy types leak out)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from hipq.frozen import quick_init
from hipq.jobs import Attempt, Job

if TYPE_CHECKING:  # the pydantic model is only carried here: no pydantic at import
    from hipq.config import QueueConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRecord:
    config: QueueConfig
    paused: bool
    created_at: datetime
    updated_at: datetime

    @property
    def id(self) -> str:
        return self.config.id


class InsertStatus(StrEnum):
    CREATED = "created"
    EXISTS = "exists"  # same (queue, id) with the same body: idempotent repeat
    CONFLICT = "conflict"  # same (queue, id) with another body, or a correlation key in use
    INVALID = "invalid"


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class InsertOutcome:
    id: str
    status: InsertStatus
    job: Job | None = None
    error: str | None = None


class InboxOutcome(StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    STALE = "stale"
    LATE = "late"  # the job had already ended; recorded on its history
    UNMATCHED = "unmatched"  # no job ever had the key within the buffer time


@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    """A response to write into the inbox."""

    correlation_key: str
    status: str = "succeeded"  # succeeded | failed | running (heartbeat) | cancelled
    attempt: int | None = None
    retryable: bool | None = None
    result: Any = None
    error: Any = None
    extend_seconds: float | None = None
    source: str = "api"
    dedup_key: str | None = None
    token: str | None = None  # a signed callback's job: applies to no other job


@dataclass(frozen=True, slots=True, kw_only=True)
class InboxRow:
    id: int
    correlation_key: str
    attempt: int | None
    status: str
    retryable: bool | None
    result: Any
    error: Any
    extend_seconds: float | None
    source: str
    received_at: datetime
    token: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedResponse:
    """An inbox row as an operator's listing shows it: ``result`` and ``error`` are
    the stored values, or (when a value's JSON text is longer than the listing's
    bound) that text cut to the bound, named in ``truncated``."""

    id: int
    correlation_key: str
    attempt: int | None
    status: str
    source: str
    received_at: datetime
    recorded_at: datetime | None  # when it got its outcome (``applied_at``)
    result: Any = None
    error: Any = None
    truncated: tuple[str, ...] = ()  # "result", "error": given as cut JSON text


@dataclass(frozen=True, slots=True, kw_only=True)
class JobHistory:
    """The last entries of a job's history (its tries and late responses), oldest
    first, and how many entries it has in all."""

    tries: list[Attempt]
    total: int


class ChangeKind(StrEnum):
    ARCHIVE = "archive"  # the job ends: succeeded, failed, cancelled
    REQUEUE = "requeue"  # a failed try is retried later
    EXTEND = "extend"  # a heartbeat moved the deadline


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One running job's new state, persisted by ``persist_batch`` (step 3)."""

    kind: ChangeKind
    queue: str
    id: str
    attempt: int
    status: str | None = None  # ARCHIVE: the terminal state
    result: Any = None
    error: dict[str, Any] | None = None
    run_at: datetime | None = None  # REQUEUE
    data: dict[str, Any] | None = None  # REQUEUE: new data, if the strategy changed it
    deadline: datetime | None = None  # EXTEND
    outcome: str | None = None  # the try's outcome for job_attempts (ARCHIVE/REQUEUE)
    response: Any = None
    launched_at: datetime | None = None
    correlation_key: str | None = None
    inbox_ids: tuple[int, ...] = ()  # responses applied by this change, marked with it


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStats:
    queue: str
    paused: bool
    queued: int
    due: int
    running: int
    running_weight: int
    oldest_due_age_seconds: float | None
    concurrency: int | None

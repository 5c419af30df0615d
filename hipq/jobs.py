"""Jobs and their states: pure data, no I/O.

A job lives in the hot ``jobs`` table while it is ``queued`` or ``running`` and
moves to ``archived_jobs`` when it reaches a terminal state. Only the reconciler
(and, for queued jobs, an explicit cancel) moves jobs between states; every move
is a guarded update, so replaying it is harmless.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from hipq.frozen import evolver, quick_init, reader

DEFAULT_PRIORITY = 100
DEFAULT_TIMEOUT_SECONDS = 86400.0
JOB_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,200}$"
# Correlation keys hipq generates (one per try: prefix, the job's token, "." and the
# attempt) start with this; a producer's key (given, or made by a template) may not,
# so no producer can take the key of another job's next try.
GENERATED_KEY_PREFIX = "~"
_JOB_ID_RE = re.compile(JOB_ID_PATTERN)


def generated_key(token: str, attempt: int) -> str:
    """The correlation key hipq makes for a try (the stores' claims write the same)."""
    return f"{GENERATED_KEY_PREFIX}{token}.{attempt}"


def is_job_id(text: str) -> bool:
    """Whether ``text`` may be a job id: the pattern in full ("$" alone would also
    match before a final newline), and not ``.`` or ``..`` (path segments that
    would rewrite a target URL)."""
    return _JOB_ID_RE.fullmatch(text) is not None and text not in (".", "..")


class JobState(StrEnum):
    QUEUED = "queued"  # enqueue, or the reconciler after a retryable failed try
    RUNNING = "running"  # the reconciler, when it launches the job (step 4)
    SUCCEEDED = "succeeded"  # the reconciler, when a success response is applied
    FAILED = "failed"  # the reconciler: retries exhausted, not retryable, or given up
    EXPIRED = "expired"  # the reconciler: expires_at passed before launch
    CANCELLED = "cancelled"  # a user (API/CLI) for a queued job; the reconciler for a running one

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.EXPIRED, JobState.CANCELLED}
)


class DeliveryStrategy(StrEnum):
    AT_LEAST_ONCE = "at_least_once"
    AT_MOST_ONCE = "at_most_once"


class Ordering(StrEnum):
    TIME_THEN_PRIORITY = "time_then_priority"
    PRIORITY_THEN_TIME = "priority_then_time"


class ErrorKind(StrEnum):
    TIMEOUT = "timeout"  # the deadline (launch + timeout, or heartbeat) passed
    HTTP_STATUS = "http_status"  # the downstream answered with a failing status
    TRANSPORT = "transport"  # the launch could not be delivered
    RESPONSE_FAILED = "response_failed"  # the downstream reported failure
    LOST = "lost"  # the owner died before the launch was confirmed
    PLUGIN = "plugin"  # a plugin raised while deciding about this job
    EXPIRED = "expired"  # expires_at passed before the job was launched
    CANCELLED = "cancelled"  # a user cancelled the job
    DROPPED = "dropped"  # a throttler dropped the job instead of launching it
    KEY_CONFLICT = "key_conflict"  # the try's correlation key was held by another job
    THROTTLED = "throttled"  # the partner said "not now" (429, 503 + Retry-After, "throttled")


class ResponseStatus(StrEnum):
    """What a response (callback, Kafka message, target answer) says of a try."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RUNNING = "running"  # a heartbeat: the try goes on (its deadline moves)
    CANCELLED = "cancelled"  # written by a cancel of a running job
    THROTTLED = "throttled"  # the partner's "not now": the try is given back (docs/throttling.md)


LATE_RESPONSE = "late_response"  # the outcome recorded for a response after its try ended


# Kinds whose outcome is unknown: an at_most_once queue never retries them.
UNKNOWN_OUTCOME_KINDS: frozenset[str] = frozenset({str(ErrorKind.TIMEOUT), str(ErrorKind.LOST)})


@dataclass(frozen=True, slots=True)
class JobError:
    """Why a try failed. ``retryable=False`` fails the job at once."""

    kind: str
    detail: str = ""
    retryable: bool = True
    data: Any = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "detail": self.detail}
        if not self.retryable:
            out["retryable"] = False
        if self.data is not None:
            out["data"] = self.data
        return out



def expired_error(detail: str = "expires_at passed before launch") -> JobError:
    return JobError(kind=ErrorKind.EXPIRED, detail=detail)


def cancelled_error() -> JobError:
    return JobError(kind=ErrorKind.CANCELLED, detail="cancelled by a user", retryable=False)


def dropped_error(reason: str) -> JobError:
    return JobError(kind=ErrorKind.DROPPED, detail=reason)


def timeout_error(deadline: datetime) -> JobError:
    return JobError(kind=ErrorKind.TIMEOUT, detail=f"no response by {deadline.isoformat()}")


def lost_error() -> JobError:
    return JobError(kind=ErrorKind.LOST, detail="the daemon that launched this try died "
                                                 "before the launch was confirmed")


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One job, as stored. Plugins receive deep copies (snapshots) of these."""

    id: str
    queue: str
    data: dict[str, Any] = field(default_factory=dict)
    status: JobState = JobState.QUEUED
    run_at: datetime
    expires_at: datetime | None = None
    priority: int = DEFAULT_PRIORITY
    weight: int = 1
    critical: bool = False
    time_windows: list[dict[str, str]] | None = None
    timezone: str | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    correlation_key: str | None = None
    correlation_fixed: bool = False
    ordering_key: str | None = None
    key_order_at: datetime | None = None  # run_at at enqueue: the order within a key
    group_key: str | None = None  # the quota field's value at enqueue (fetch per group)
    attempt: int = 0
    max_attempts: int = 1
    created_at: datetime
    updated_at: datetime
    launched_at: datetime | None = None
    deadline: datetime | None = None
    owner: str | None = None
    launch_confirmed: bool = False
    result: Any = None
    error: dict[str, Any] | None = None
    replay_of: str | None = None
    token: str = ""
    body_hash: str = ""
    finished_at: datetime | None = None
    # the W3C trace context it was enqueued with (hipq.tracing: traceparent[ tracestate])
    trace: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.queue, self.id)

    def snapshot(self) -> Job:
        """A deep copy: what a plugin may look at (and scribble on) freely."""
        result, error, windows = self.result, self.error, self.time_windows
        return _with_copies(self, json_copy(self.data),
                            None if result is None else json_copy(result),
                            None if error is None else json_copy(error),
                            None if windows is None else json_copy(windows))

    def evolve(self, **changes: Any) -> Job:
        """A copy with ``changes`` (like :func:`dataclasses.replace`, without
        re-running ``__init__``: the reconcile loop does this per job per tick)."""
        return evolver(Job, tuple(changes))(self, *changes.values())

    def to_json(self) -> dict[str, Any]:
        """The public JSON shape of a job (history is added by the caller)."""
        return {
            "id": self.id,
            "queue": self.queue,
            "status": str(self.status),
            "data": self.data,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "run_at": _iso(self.run_at),
            "expires_at": _iso(self.expires_at),
            "priority": self.priority,
            "weight": self.weight,
            "critical": self.critical,
            "correlation_key": self.correlation_key,
            "ordering_key": self.ordering_key,
            "timeout_seconds": self.timeout_seconds,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "launched_at": _iso(self.launched_at),
            "finished_at": _iso(self.finished_at),
            "result": self.result,
            "error": self.error,
            "replay_of": self.replay_of,
            "trace_id": None if self.trace is None else self.trace[3:35],
        }


_with_copies = evolver(Job, ("data", "result", "error", "time_windows"))


class NewJobs(list[Job]):
    """New jobs with the JSON text of each one's ``data`` (``data_texts[i]`` is
    ``self[i].data``'s, as the enqueue encoded it for the body hash): a store that
    writes JSON as text may send it instead of encoding the data again
    (hipq.store.pgsql). A list of jobs to everyone else."""

    __slots__ = ("data_texts",)

    def __init__(self, jobs: Sequence[Job], data_texts: Sequence[str]) -> None:
        super().__init__(jobs)
        if len(data_texts) != len(self):
            raise ValueError("one data text per job")
        self.data_texts = data_texts


_STATES: dict[str, JobState] = {state.value: state for state in JobState}


def row_reader(columns: Sequence[str]) -> Callable[[Any], Job]:
    """A function making a :class:`Job` from a row whose values come in the order
    of ``columns`` (field names; others are ignored, missing ones take their
    defaults; ``status`` may be its text)."""
    return reader(Job, columns, {"status": _STATES.__getitem__})


_SCALARS = frozenset({str, int, float, bool, type(None)})


def json_copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars), several times
    faster than :func:`copy.deepcopy`; anything else is deep-copied."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        return _dict_copy(value)
    if kind is list:
        return _list_copy(value)
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    if isinstance(value, str | int | float | bool):
        return value
    return copy.deepcopy(value)


def _dict_copy(value: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy (in C), then a copy of each value that is not a scalar."""
    out = value.copy()
    for k, v in value.items():
        if type(v) not in _SCALARS:
            out[k] = json_copy(v)
    return out


def _list_copy(value: list[Any]) -> list[Any]:
    out = value.copy()
    for i, v in enumerate(value):
        if type(v) not in _SCALARS:
            out[i] = json_copy(v)
    return out


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    """One try of a job, as recorded in ``job_attempts``."""

    attempt: int
    launched_at: datetime | None
    finished_at: datetime | None
    outcome: str
    error: dict[str, Any] | None = None
    response: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "launched_at": _iso(self.launched_at),
            "finished_at": _iso(self.finished_at),
            "outcome": self.outcome,
            "error": self.error,
        }

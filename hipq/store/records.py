"""Plain records the store takes and returns (no SQLAlchemy types leak out)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from hipq.frozen import quick_init
from hipq.jobs import Attempt, Job
from hipq.pause_scope import shown_group
from hipq.spec import QueueSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRecord:
    """A queue as stored: ``spec``, its settings as the engine uses them (made once
    per settings change, :func:`hipq.queue_settings.spec_of`), and ``settings``, the
    stored JSON mapping they were made of (read-only; ``paused`` as it is now), for
    what the spec leaves out (the target, correlation, a throttler plugin's options)
    and for the API, which echoes them."""

    spec: QueueSpec
    settings: Mapping[str, Any]
    paused: bool
    created_at: datetime
    updated_at: datetime

    @property
    def id(self) -> str:
        return self.spec.id


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


@quick_init  # made once per response (issue 28)
@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    """A response to write into the inbox."""

    correlation_key: str
    status: str = "succeeded"  # succeeded | failed | running (heartbeat) | cancelled
    attempt: int | None = None
    retryable: bool | None = None
    result: Any = None
    error: Any = None
    extend_seconds: float | None = None  # a heartbeat's; a throttled answer's retry_after
    source: str = "api"
    dedup_key: str | None = None
    token: str | None = None  # a signed callback's job: applies to no other job


@quick_init  # made once per response (issue 28)
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


@dataclass(frozen=True, slots=True)
class InboxPage:
    """A page of pending inbox rows (:meth:`~hipq.store.base.Store.inbox_pending_scan`):
    ``more`` when it ended at its row limit or its size bound, so that rows may
    follow its last one; False when it reached the last pending row."""

    rows: list[InboxRow]
    more: bool

    def __len__(self) -> int:
        return len(self.rows)


def written_rows(responses: Sequence[Response], ids: Sequence[int | None],
                 received_at: datetime) -> list[InboxRow]:
    """The inbox rows ``inbox_insert_many(responses, now=received_at)`` wrote, from
    its answer ``ids`` (None: a repeated dedup_key, not written): what reading them
    back would give."""
    return [InboxRow(id=row_id, correlation_key=r.correlation_key, attempt=r.attempt,
                     status=r.status, retryable=r.retryable, result=r.result, error=r.error,
                     extend_seconds=r.extend_seconds, source=r.source,
                     received_at=received_at, token=r.token)
            for r, row_id in zip(responses, ids, strict=True) if row_id is not None]


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
class ListedJob:
    """A job as a listing of many shows it (``GET /v1/job-search``): ``job`` as
    stored, except that each of its ``data``, ``result`` and ``error`` whose JSON
    text is longer than the listing's bound is left empty there and given in ``cut``
    as that text cut to the bound (by name)."""

    job: Job
    cut: dict[str, str]


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
    give_back: bool = False  # REQUEUE of a throttled try: the attempt is not spent
    token: str | None = None  # REQUEUE: the job's new token (a throttled try's give-back)
    trace: str | None = None  # the job's trace context (hipq.tracing), for logs and spans


@dataclass(slots=True, kw_only=True)
class IntakeRow:
    """A row of the intake (docs/from-your-database.md): a job a producer enqueued from SQL, pending
    (``error`` None) or rejected with its error. Not frozen: one is made per row
    ingested, and a frozen dataclass's ``__init__`` costs twice as much.

    ``size``: the bytes of its ``data`` and ``fields`` as JSON text, measured by the
    database. ``problem``: why the store could not read the row as a job (over the
    limit: ``data`` and ``fields`` are then None, never read; a time out of range,
    JSON text that is not one value); such a row is rejected on its own. ``cut``: in
    a listing, the values given cut (as text) to the listing's bound."""

    id: int
    queue: str
    job_id: str | None
    data: Any
    run_after: datetime | None
    fields: Any
    enqueued_at: datetime | None
    error: str | None = None
    rejected_at: datetime | None = None
    size: int = 0
    problem: str | None = None
    cut: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat().replace("+00:00", "Z")
        return {"intake_id": self.id, "queue": self.queue, "id": self.job_id,
                "data": _listed(self.data, "data" in self.cut),
                "run_after": iso(self.run_after),
                "fields": _listed(self.fields, "fields" in self.cut),
                "enqueued_at": iso(self.enqueued_at),
                "error": self.error, "rejected_at": iso(self.rejected_at)}


def _listed(raw: Any, cut: bool) -> Any:
    """A JSON column as a listing shows it: decoded, or its text when cut."""
    return raw if cut else json_value(raw)[0]


def json_value(raw: Any) -> tuple[Any, str | None]:
    """A column's JSON: as the driver gave it (decoded), or decoded from its text;
    text that Python cannot decode (nested past the interpreter's recursion limit)
    stays text, with why."""
    if not isinstance(raw, str):
        return raw, None
    try:
        return json.loads(raw), None
    except RecursionError:
        return raw, "nested too deeply"
    except ValueError as exc:
        return raw, f"not JSON: {exc}"


# The intake's bounds (docs/from-your-database.md, "Limits"): what hipq_enqueue()
# refuses and ingestion rejects, stored in hipq_meta under INTAKE_LIMIT_KEY by
# each daemon at start (api.max_body_bytes), INTAKE_MAX_BYTES when none did.
INTAKE_LIMIT_KEY = "intake_max_bytes"
INTAKE_MAX_BYTES = 1_048_576
INTAKE_READ_BYTES = 8 * 1024 * 1024  # the byte budget of one read of pending rows
INTAKE_VALUE_CHARS = 4096  # a listed string or value's JSON text, at most
FUTURE_REJECTION = timedelta(days=1)  # a rejection time past now + this is not hipq's
# The intake's counts per queue: every queue that exists, this many other names (cut
# to 100 characters), the rest summed under INTAKE_OTHER (hipq.metrics.OTHER_QUEUE).
INTAKE_OTHER_NAMES = 100
INTAKE_OTHER = "(other)"
# The instants hipq reads from a row: a finite time a day inside Python's range, so
# no conversion (to UTC, to a time zone) can leave it. hipq_enqueue() refuses others.
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, tzinfo=UTC)
INTAKE_TIMES = ("run_after", "enqueued_at")  # the times of a row a job is made of
# A job id and a queue name are read cut one character past the longest valid one
# (hipq.jobs.JOB_ID_PATTERN, hipq.config.QUEUE_ID_PATTERN): the verdict stays.
INTAKE_ID_CHARS = 201
INTAKE_QUEUE_CHARS = 101


def too_big(size: int, max_bytes: int) -> str:
    """Why a row of ``size`` bytes is not read: the rejection it gets."""
    return (f"data and fields are {size} bytes of JSON text, over the limit of "
            f"{max_bytes} bytes (api.max_body_bytes)")


def unreadable(column: str) -> str:
    """The rejection of a row whose ``column`` the store could not read."""
    if column in INTAKE_TIMES:
        return f"{column} is not a time hipq can read (a finite time between the years 1 and 9999)"
    if column == "id":
        return "id is not text"
    return f"{column} is not one JSON value"


def intake_of(row: Any, *, max_bytes: int | None = None) -> IntakeRow:
    """An IntakeRow of a read of pending rows; ``data`` and ``fields`` as the driver
    gives them (PostgreSQL: JSON text, decoded only where needed: :func:`json_value`),
    with the ``size`` the statement measured and, in ``unreadable``, the name of what
    it could not read (the problem made of it here, with ``max_bytes`` or the row's
    own ``max_bytes``: the stored limit)."""
    problem = row["unreadable"]
    if problem is not None:
        if problem == "size":
            limit = max_bytes or row.get("max_bytes") or INTAKE_MAX_BYTES
            problem = too_big(row["size"], limit)
        else:
            problem = unreadable(problem)
    return IntakeRow(id=row["id"], queue=row["queue"], job_id=row["job_id"],
                     data=row["data"], run_after=row["run_after"], fields=row["fields"],
                     enqueued_at=row["enqueued_at"], error=row["error"],
                     rejected_at=row["rejected_at"], size=row["size"], problem=problem)


def listed_intake_of(row: Any) -> IntakeRow:
    """An IntakeRow of a listing: its values as the statement gave them, whole or cut
    (``<name>_cut`` true: the value is its text cut to the listing's bound)."""
    return IntakeRow(id=row["id"], queue=row["queue"], job_id=row["job_id"],
                     data=row["data"], run_after=row["run_after"], fields=row["fields"],
                     enqueued_at=row["enqueued_at"], error=row["error"],
                     rejected_at=row["rejected_at"], size=row["size"],
                     cut=tuple(name for name in _CUT if row[f"{name}_cut"]))


_CUT = ("queue", "id", "data", "fields", "error")  # what a listing may cut


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """A partner's pause of one scope of a queue (docs/throttling.md): the whole queue
    (``group`` None) or the jobs whose backoff field's value has the group ``group``
    (the value in its bounded form, :func:`hipq.pause_scope.group_of`).
    ``streak``: throttled tries in a row of the scope (the back-off doubles with
    it); ``since``: when the pause (or its last extension) began."""

    queue: str
    group: str | None
    until: datetime
    reason: str
    streak: int = 1
    since: datetime

    @property
    def scope(self) -> str:
        """The stored form of the scope: "" for the queue, "=" and the value."""
        return "" if self.group is None else "=" + self.group

    def to_json(self) -> dict[str, Any]:
        return {"group": shown_group(self.group),
                "until": self.until.isoformat().replace("+00:00", "Z"),
                "reason": self.reason}


def backoff_of(row: Any) -> Backoff:
    scope = row["scope"]
    return Backoff(queue=row["queue"], group=None if scope == "" else scope[1:],
                   until=row["until"], reason=row["reason"], streak=row["streak"],
                   since=row["since"])


@dataclass(slots=True, kw_only=True)
class QueueState:
    """What the owner of a queue learned of it (docs/throttling.md): the adaptive limit
    (``effective``; None: the configured one), successes since its last change,
    the time of its last decrease, the due jobs held back at its last tick by reason,
    and its throttled tries in all."""

    queue: str
    effective: float | None = None
    successes: int = 0
    decreased_at: datetime | None = None
    held: dict[str, int] | None = None
    held_at: datetime | None = None
    throttled_total: int = 0
    learned_rate: float | None = None  # the rate last refused (CUBIC's w_max), a second
    learned_since: datetime | None = None  # when that refusal came
    budget: dict[str, Any] | None = None  # a partner's buckets, on its first queue


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStanding:
    """Where a queued job stands in its queue, for "why a job waits" (docs/throttling.md):
    ``running``, the weight of the queue's running jobs by (critical, ``group_key``);
    ``key_ahead``, the first job of its ordering key that holds it back (running, or
    queued before it); ``ahead``, the due queued jobs before it in the queue's order
    (counted up to the read's limit)."""

    running: dict[tuple[bool, str | None], int]
    key_ahead: str | None = None
    ahead: int = 0


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

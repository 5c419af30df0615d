"""The HTTP API's pydantic models: request bodies, query strings and answers.

The handlers validate with these models and serialize through them, and
``/openapi.json`` is generated from the same classes, so the document cannot drift
from what the server does. Request bodies reuse the core's own models
(``QueueConfig``, ``EnqueueRequest``, ``BatchItem``, ``ResponseRequest``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, RootModel

from hipq.api.cursors import ARCHIVED_CURSOR, ROW_CURSOR, cursor_param
from hipq.bodies import BatchItem
from hipq.config import QueueConfig
from hipq.responses.signing import NONCE_PATTERN

MAX_BATCH = 10_000
PAUSES_SHOWN = 100  # a queue's partner pauses in its JSON: the soonest to end
MAX_PAGE = 1000
HISTORY_SHOWN = 50  # history entries in a job's JSON: its last ones (docs/http-api.md)


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ErrorDetail(_Out):
    code: str = Field(description="a stable machine-readable code, e.g. 'queue_not_found'")
    message: str
    details: Any = None


class ErrorOut(_Out):
    error: ErrorDetail


class AttemptOut(_Out):
    attempt: int
    launched_at: AwareDatetime | None
    finished_at: AwareDatetime | None
    outcome: str
    error: dict[str, Any] | None = None


class WaitingOut(_Out):
    """Why a queued job waits (docs/throttling.md): the first reason that applies, in this order."""

    reason: Literal["paused", "not_due", "backoff", "window", "ordering_key", "rate_limit",
                    "quota", "concurrency", "position"]
    detail: str = Field(description="e.g. 'running 60 of 60', 'behind job j1 of key k'")
    until: AwareDatetime | None = Field(
        default=None, description="when this reason ends, if known (not_due, backoff, "
        "window, rate_limit)")


class JobOut(_Out):
    id: str
    queue: str
    status: str
    data: dict[str, Any]
    attempt: int
    max_attempts: int
    run_at: AwareDatetime
    expires_at: AwareDatetime | None
    priority: int
    weight: int
    critical: bool
    correlation_key: str | None
    ordering_key: str | None
    timeout_seconds: float
    created_at: AwareDatetime
    updated_at: AwareDatetime
    launched_at: AwareDatetime | None = None
    finished_at: AwareDatetime | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    replay_of: str | None = None
    trace_id: str | None = Field(
        default=None, pattern="^[0-9a-f]{32}$",
        description="the W3C trace id the job was enqueued with (its traceparent field, or "
        "the traceparent header of the enqueue request); null without one (docs/traces.md)")
    history: list[AttemptOut] = Field(
        default_factory=list,
        description=f"the job's tries and late responses, oldest first: at most the last "
        f"{HISTORY_SHOWN} entries (GET of one job; empty in the other answers)")
    history_count: int | None = Field(
        default=None, description="how many history entries the job has in all (GET of one "
        "job; null in the other answers)")
    waiting: WaitingOut | None = Field(
        default=None, description="why a queued job waits, computed from the database when "
        "asked (GET of one job; null once it runs, and in the other answers)")


class QueueStatsOut(_Out):
    queue: str
    paused: bool
    queued: int
    due: int
    running: int
    running_weight: int
    oldest_due_age_seconds: float | None
    concurrency: int | None
    intake: int = Field(default=0, description="jobs enqueued from SQL (hipq_enqueue(), "
                        "hipq.sql) that its owner has not ingested yet")


class BackoffOut(_Out):
    """A partner's pause in force (docs/throttling.md): no job of its scope launches before
    ``until``."""

    group: str | None = Field(description="the value at backoff.field of the jobs paused "
                              "(one over 128 characters: its first 128, '…sha256:' and the "
                              "SHA-256 of the whole value in hex); null: the whole queue")
    until: AwareDatetime
    reason: str = Field(description='why, e.g. "HTTP 429 from https://partner.example" or '
                        '"budget spent"')


class QueueOut(_Out):
    id: str
    paused: bool
    config: QueueConfig
    created_at: AwareDatetime
    updated_at: AwareDatetime
    stats: QueueStatsOut | None = None
    backoff: list[BackoffOut] = Field(
        default_factory=list, description=f"the partner's pauses in force now, soonest end "
        f"first (at most {PAUSES_SHOWN}); a resume ends them")
    effective_concurrency: int | None = Field(
        default=None, description="the concurrency in force: the adaptive limit when the "
        "queue adapts, else the configured one (null: no concurrency)")
    held: dict[str, int] = Field(
        default_factory=dict, description="the due jobs its owner held back at its last tick, "
        "by reason: concurrency, quota, window, rate_limit, backoff, ordering_key, throttler, "
        "partner (the learned rate)")
    throttled_total: int = Field(default=0, description="throttled tries of the queue in all")
    learned_rate: float | None = Field(
        default=None, description="launches a second its owner allows now, learned from "
        "refusals that gave no time (null: no learned limit; docs/throttling.md, "
        "\"Partners\")")


class QueueList(_Out):
    queues: list[QueueOut]


class BatchRequest(_In):
    """Up to 10,000 jobs; each is checked on its own (a bad one is ``invalid``)."""

    jobs: Annotated[list[BatchItem], Field(max_length=MAX_BATCH)]


class BatchEnvelope(_In):
    """How the handler reads a batch: the envelope strictly, the items one by one
    with :class:`~hipq.bodies.BatchItem`, so one bad item does not reject the rest."""

    jobs: Annotated[list[Any], Field(max_length=MAX_BATCH)]


class BatchResult(_Out):
    id: str
    status: str = Field(description="created | exists | conflict | invalid")
    error: str | None = None


class BatchOut(_Out):
    jobs: list[BatchResult]


class ArchivedQuery(_In):
    name: Annotated[str, Field(min_length=1, max_length=100)] | None = Field(
        default=None, description="only this queue")
    status: Annotated[str, Field(pattern=r"^(succeeded|failed|expired|cancelled)$")] | None = None
    limit: int = Field(default=100, ge=1, le=MAX_PAGE)
    cursor: str | None = cursor_param(ARCHIVED_CURSOR, "finished_at~queue~id")


class ArchivedPage(_Out):
    jobs: list[JobOut]
    next_cursor: str | None


class ResponsesQuery(_In):
    outcome: Literal["unmatched"] = Field(
        default="unmatched", description="which responses: those recorded as unmatched "
        "(the other outcomes are counted in /v1/stats)")
    limit: int = Field(default=100, ge=1, le=MAX_PAGE)
    cursor: str | None = cursor_param(ROW_CURSOR, "received_at~id")


class ResponseOut(_Out):
    """A response from the inbox; ``result`` and ``error`` as stored, or, when one's
    JSON text is longer than 4,096 characters, that text cut there (a string) and
    named in ``truncated``."""

    id: int
    correlation_key: str
    attempt: int | None
    status: str
    source: str = Field(description="where it came in: http (a signed callback URL, "
                        "/v1/inbox), callback (a status callback), kafka")
    received_at: AwareDatetime
    recorded_at: AwareDatetime | None = Field(description="when it was recorded as unmatched")
    result: Any = None
    error: Any = None
    truncated: list[Literal["result", "error"]] = Field(default_factory=list)


class ResponsesPage(_Out):
    responses: list[ResponseOut]
    next_cursor: str | None


class CallbackQuery(_In):
    attempt: int = Field(ge=1, le=1_000_000)
    t: Annotated[str, Field(min_length=1, max_length=200)]  # the job's token
    sig: Annotated[str, Field(min_length=1, max_length=200)]


class AcceptedOut(_Out):
    accepted: bool = True
    duplicate: bool = Field(default=False, description="the same response was stored before")
    correlation_key: str | None = None


class ResponseCounts(_Out):
    pending: int = 0
    applied: int = 0
    duplicate: int = 0
    stale: int = 0
    late: int = 0
    unmatched: int = 0


class IntakeCounts(_Out):
    pending: int = Field(default=0, description="rows enqueued from SQL, not ingested yet")
    rejected: int = Field(default=0, description="rows rejected at ingest, kept with their "
                          "error: GET /v1/intake?status=rejected")


class StatsOut(_Out):
    queues: list[QueueStatsOut]
    responses: ResponseCounts
    intake: IntakeCounts = Field(default_factory=IntakeCounts, description="the intake "
                                 "(docs/from-your-database.md) in all, every queue")


class HealthQuery(BaseModel):
    # other query parameters are let be: a monitor may add one of its own
    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)
    nonce: str | None = Field(
        default=None, pattern=NONCE_PATTERN, description="a random nonce (lowercase hex, "
        "32 to 128 digits): the answer's proof shows this daemon holds the database's "
        "signing key (docs/http-api.md, \"/healthz\")")


class HealthOut(_Out):
    status: str
    database: str
    instance: str | None = Field(
        default=None, description="names the database this daemon works on: a random id "
                                  "kept in it (no secret, and no proof of anything)")
    proof: str | None = Field(
        default=None, description="with ?nonce=: HMAC-SHA256 (hex) of the nonce and of "
                                  "this TCP connection's two ends, under a key derived "
                                  "from the signing key; the CLI checks it before it "
                                  "sends a token")


class AnyObject(RootModel[dict[str, Any]]):
    """Any JSON object (a downstream's own response body)."""

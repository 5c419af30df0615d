"""Request models shared by the Python API, the CLI and (later) the HTTP API."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from hipq.config import TimeWindow
from hipq.jobs import DEFAULT_PRIORITY, JOB_ID_PATTERN

JobId = Annotated[str, Field(pattern=JOB_ID_PATTERN)]


class EnqueueRequest(BaseModel):
    """The body of an enqueue (``PUT /v1/jobs/{queue}/{id}``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: dict[str, Any] = Field(default_factory=dict)
    run_after: AwareDatetime | None = None
    expires_at: AwareDatetime | None = None
    priority: int = Field(default=DEFAULT_PRIORITY, ge=-1_000_000, le=1_000_000)
    weight: int | None = Field(default=None, ge=1, le=1_000_000)
    time_windows: list[TimeWindow] | None = None
    timezone: str | None = None
    timeout_seconds: float | None = Field(default=None, gt=0, le=365 * 86400)
    correlation_key: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    ordering_key: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    critical: bool = False

    def body_hash(self) -> str:
        """A stable digest of the request: equal bodies make an idempotent repeat."""
        body = self.model_dump(mode="json", exclude=_NOT_HASHED)
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()


class BatchItem(EnqueueRequest):
    """One item of a batch enqueue: a request with its job id (not part of the
    body hash, so a batch item and a PUT of the same body are the same job)."""

    id: JobId


_NOT_HASHED = {"id"}


class ResponseRequest(BaseModel):
    """A response reported for a job (callback body, Kafka value, Python API)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal["succeeded", "failed", "running"] = "succeeded"
    attempt: int | None = Field(default=None, ge=1)
    retryable: bool | None = None
    result: Any = None
    error: Any = None
    extend_seconds: float | None = Field(default=None, gt=0, le=365 * 86400)


def run_after_or(value: datetime | None, default: datetime) -> datetime:
    return default if value is None else value

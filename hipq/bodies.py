"""Request models shared by the Python API, the CLI and (later) the HTTP API."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
)

from hipq import json_text
from hipq.config import TimeWindow, known_timezone
from hipq.frozen import quick_init
from hipq.jobs import DEFAULT_PRIORITY
from hipq.tracing import (
    TRACEPARENT_PATTERN,
    TRACESTATE_PATTERN,
    stored,
    traceparent_field,
    tracestate_field,
)
from hipq.values import INT32_MAX, checked


def _in_utc_range(value: datetime) -> datetime:
    """An aware time that converts to UTC (``9999-12-31T23:59:59-14:00`` does not)."""
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise ValueError("the time is out of range once converted to UTC") from None
    return value


# JOB_ID_PATTERN without "." and "..": one pattern, tested in Rust by pydantic (no
# Python validator called per batch item); the same ids as hipq.jobs.is_job_id
JOB_ID_NOT_DOTS = (r"^(?:[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,199}"
                   r"|\.[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,198}"
                   r"|\.\.[A-Za-z0-9_.:-]{1,198})$")
JobId = Annotated[str, Field(pattern=JOB_ID_NOT_DOTS)]
# a JSON value from outside: bounded depth, finite in-range numbers, no NUL (hipq.values)
JsonData = Annotated[dict[str, Any], AfterValidator(checked)]
JsonAny = Annotated[Any, AfterValidator(checked)]
Instant = Annotated[AwareDatetime, AfterValidator(_in_utc_range)]
# no NUL (the stores refuse it): published as a pattern, checked by hipq.values.checked
NO_NUL = "^[^\\u0000]*$"
Key = Annotated[str, Field(min_length=1, max_length=500, json_schema_extra={"pattern": NO_NUL}),
                AfterValidator(checked)]


def _traceparent(value: str) -> str:
    parsed = traceparent_field(value)
    if parsed is None:
        raise ValueError("not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, lower case, "
                         "ids not all zero)")
    return parsed


def _tracestate(value: str) -> str:
    parsed = tracestate_field(value)
    if parsed is None:
        raise ValueError("not a W3C tracestate (1-512 printable ASCII characters, no white "
                         "space at either end)")
    return parsed


# the patterns (with look-aheads) are the document's; the validators check the same
Traceparent = Annotated[str, Field(json_schema_extra={"pattern": TRACEPARENT_PATTERN}),
                        AfterValidator(_traceparent)]
Tracestate = Annotated[str, Field(json_schema_extra={"pattern": TRACESTATE_PATTERN}),
                       AfterValidator(_tracestate)]


class EnqueueRequest(BaseModel):
    """The body of an enqueue (``PUT /v1/jobs/{queue}/{id}``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: JsonData = Field(default_factory=dict)
    run_after: Instant | None = None
    expires_at: Instant | None = None
    priority: int = Field(default=DEFAULT_PRIORITY, ge=-1_000_000, le=1_000_000)
    weight: int | None = Field(default=None, ge=1, le=1_000_000)
    time_windows: list[TimeWindow] | None = None
    timezone: Annotated[str, AfterValidator(known_timezone)] | None = None
    timeout_seconds: float | None = Field(default=None, gt=0, le=365 * 86400)
    correlation_key: Key | None = None
    ordering_key: Key | None = None
    critical: bool = False
    # the job's W3C trace context (docs/traces.md); not part of the body hash
    traceparent: Traceparent | None = Field(
        default=None, description="a W3C traceparent for this job (else the request's "
        "traceparent header, for every item of a batch); a malformed one is refused, a "
        "malformed header ignored (docs/traces.md)")
    tracestate: Tracestate | None = Field(
        default=None, description="the W3C tracestate that goes with traceparent")

    @property
    def trace(self) -> str | None:
        """The stored form of the body's own trace context (hipq.tracing), if any."""
        if self.traceparent is None:
            return None
        return stored(self.traceparent, self.tracestate)

    def body_hash(self) -> str:
        """A stable digest of the request: equal bodies make an idempotent repeat."""
        if self.model_fields_set <= _DATA_ONLY and _json_shaped(self.data):
            # Only ``data`` given (the common case), and it is JSON as parsed: the
            # canonical text is the defaults' with ``data`` spliced in, the same
            # text the general path makes (which converts what JSON cannot hold).
            try:
                data = _PLAIN(self.data)
            except ValueError:  # NaN or infinity: the general path turns them to null
                pass
            else:
                return hashlib.sha256(f"{_HEAD}{data}{_TAIL}".encode()).hexdigest()
        return hashlib.sha256(self._canonical().encode()).hexdigest()

    def _canonical(self) -> str:
        return _CANONICAL.encode(self.model_dump(mode="json", exclude=_NOT_HASHED))


class BatchItem(EnqueueRequest):
    """One item of a batch enqueue: a request with its job id (not part of the
    body hash, so a batch item and a PUT of the same body are the same job)."""

    id: JobId


# a retried request may carry a new trace context: still the same job
_NOT_HASHED = {"id", "traceparent", "tracestate"}
_DATA_ONLY = frozenset({"id", "data", "traceparent", "tracestate"})
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_PLAIN = json_text.encoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           allow_nan=False)
_MARK = "\x00data\x00"  # where ``data`` goes in the canonical text of the defaults
_HEAD, _TAIL = EnqueueRequest.model_construct()._canonical().replace(
    '"data":{}', f'"data":{_MARK}', 1).split(_MARK)


@quick_init  # made once per batch item
@dataclass(frozen=True, slots=True)
class DataOnly:
    """An enqueue that gives only ``data`` (every other field at its default, no
    trace context of its own): the same job and the same body hash as
    ``EnqueueRequest(data=data)``, without a model. ``data`` must be JSON as parsed
    (str keys, lists, str, int, float, bool, None) and storable (hipq.values: checked
    by the caller); ``text`` is its canonical JSON text (:meth:`of`), which the
    body hash is made of and a store may write as the job's data."""

    data: dict[str, Any]
    text: str
    traceparent: ClassVar[None] = None  # the request's (or none), as for a model without one
    trace: ClassVar[None] = None

    @classmethod
    def of(cls, data: dict[str, Any]) -> DataOnly:
        """``data`` with its text (ValueError for NaN or infinity, which no
        checked value holds)."""
        return cls(data, _PLAIN(data))

    def body_hash(self) -> str:
        """:meth:`EnqueueRequest.body_hash` of ``EnqueueRequest(data=data)``."""
        return hashlib.sha256(f"{_HEAD}{self.text}{_TAIL}".encode()).hexdigest()

    def request(self) -> EnqueueRequest:
        """The model this stands for."""
        return EnqueueRequest(data=self.data)


MAX_RESPONSE_SECONDS = 365 * 86400.0  # a longer retry_after_seconds reads as this
_CLEAN_SECONDS = re.compile(r"[0-9]{1,40}(?:\.[0-9]{1,40})?").fullmatch  # ASCII digits only


def partner_seconds(value: Any) -> float | None:
    """A throttled answer's ``retry_after_seconds`` as the engine takes it: a number
    of seconds >= 0 (a JSON number, or ASCII digits in a string), at most
    :data:`MAX_RESPONSE_SECONDS`; anything else is no time, never an error
    (docs/throttling.md, "Who may pause, and for how long": a refused answer would
    leave its try to time out and spend an attempt)."""
    if isinstance(value, str):
        value = float(value) if _CLEAN_SECONDS(value) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        return None
    return MAX_RESPONSE_SECONDS if value >= MAX_RESPONSE_SECONDS else float(value)


class ResponseRequest(BaseModel):
    """A response reported for a job (callback body, Kafka value, Python API)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal["succeeded", "failed", "running", "throttled"] = "succeeded"
    attempt: int | None = Field(default=None, ge=1, le=INT32_MAX)
    retryable: bool | None = None
    result: JsonAny = None
    error: JsonAny = None
    extend_seconds: float | None = Field(default=None, gt=0, le=365 * 86400)
    retry_after_seconds: Annotated[float | None, BeforeValidator(
        partner_seconds, json_schema_input_type=float | str | None)] = Field(
        default=None, description="a throttled answer's time: seconds, a JSON number or "
        "ASCII digits; a longer time than a year reads as a year, anything else as none "
        "(never refused); a pause it causes is capped at backoff.max_partner_seconds")

    @property
    def seconds(self) -> float | None:
        """What the inbox keeps in its one seconds column: a heartbeat's
        ``extend_seconds``, or a throttled answer's ``retry_after_seconds``."""
        return self.retry_after_seconds if self.status == "throttled" else self.extend_seconds


def _json_shaped(value: Any) -> bool:
    """Whether ``value`` is made of what a JSON parser returns (str keys, lists,
    str, int, float, bool, None) and so encodes the same before and after
    pydantic's JSON-mode conversion."""
    kind = type(value)
    if kind is dict:
        return all(type(k) is str and _json_shaped(v) for k, v in value.items())
    if kind is list:
        return all(_json_shaped(v) for v in value)
    return value is None or kind in _JSON_SCALARS


_JSON_SCALARS = frozenset({str, int, float, bool})

"""How queues obey their partners, in the configuration (docs/throttling.md): the
partner's word (``backoff``, ``adaptive``) and the partners several queues share
(``partners:``, docs/throttling.md, "Partners")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from hipq.config_fields import DATA_PATH, MAX_SECONDS, QUEUE_ID_PATTERN, Matching
from hipq.config_fields import Strict as _Strict
from hipq.spec import BackoffSpec, LimitSpec, PartnerSpec
from hipq.values import INT32_MAX


class Backoff(_Strict):
    """How a queue obeys its partner's "not now" (docs/throttling.md): the scope a throttled
    try pauses (the whole ``queue``, or the ``group`` of jobs sharing the value at
    ``field``), the back-off when the partner gives no time, the longest pause a
    time the partner gives may cause, and how many throttled tries of one job in a
    row are given back before one counts as failed."""

    scope: Literal["queue", "group"] = "queue"
    field: Annotated[str, Matching(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")] | None = None
    initial_seconds: float = Field(default=1.0, gt=0, le=MAX_SECONDS)
    max_seconds: float = Field(default=300.0, gt=0, le=MAX_SECONDS)
    max_partner_seconds: float = Field(
        default=3600.0, gt=0, le=MAX_SECONDS,
        description="the longest pause a time the partner gives (Retry-After, a "
                    "rate-limit reset, retry_after_seconds) may cause")
    max_throttled: int = Field(default=50, ge=0, le=1_000_000)
    learn: bool = Field(
        default=True,
        description="when the partner refuses without saying until when, learn its rate "
                    "(lower it, then probe back up) instead of pausing for a doubling time")

    @model_validator(mode="after")
    def _scoped(self) -> Backoff:
        if self.scope == "group" and self.field is None:
            raise ValueError("backoff scope 'group' needs a field (a path into data)")
        if self.scope == "queue" and self.field is not None:
            raise ValueError("backoff field is for scope 'group'")
        if self.max_seconds < self.initial_seconds:
            raise ValueError("backoff max_seconds is smaller than initial_seconds")
        return self

    def to_spec(self) -> BackoffSpec:
        return BackoffSpec(scope=self.scope, field=self.field,
                           initial_seconds=self.initial_seconds, max_seconds=self.max_seconds,
                           max_partner_seconds=self.max_partner_seconds,
                           max_throttled=self.max_throttled, learn=self.learn)


class Adaptive(_Strict):
    """Adaptive concurrency (AIMD): the effective limit starts at ``concurrency``, is
    multiplied by ``decrease`` (not below ``min``) on a throttled or timed-out try and
    grows by one after every ``increase_every`` successes."""

    min: int = Field(default=1, ge=1, le=INT32_MAX)
    increase_every: int = Field(default=20, ge=1, le=1_000_000)
    decrease: float = Field(default=0.5, gt=0, lt=1)


MAX_PARTNER_LIMITS = 16


class PartnerLimit(_Strict):
    """One bucket: ``requests`` or ``cost`` per ``per_seconds``."""

    requests: float | None = Field(default=None, gt=0, le=1e12)
    cost: float | None = Field(default=None, gt=0, le=1e15)
    per_seconds: float = Field(gt=0, le=MAX_SECONDS)

    @model_validator(mode="after")
    def _one_unit(self) -> PartnerLimit:
        if (self.requests is None) == (self.cost is None):
            raise ValueError("a limit counts either requests or cost (one of the two)")
        return self

    def to_spec(self) -> LimitSpec:
        unit, amount = (("requests", self.requests) if self.requests is not None
                        else ("cost", self.cost))
        assert amount is not None
        return LimitSpec(unit=unit, amount=float(amount), per_seconds=self.per_seconds)


class PartnerCost(_Strict):
    """The cost of a launch: the number at ``estimate`` (a path into data), else
    ``default``; reserved at launch, replaced by the actual cost the response reports
    (``usage: {cost: n}``, or the header named ``header``)."""

    estimate: Annotated[str, Matching(DATA_PATH)] | None = None
    default: float = Field(default=1.0, ge=0, le=1e15)
    header: Annotated[str, Matching(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")] | None = None


class PartnerConfig(_Strict):
    """A partner several queues call: one budget for all of them."""

    id: Annotated[str, Matching(QUEUE_ID_PATTERN)]
    concurrency: int | None = Field(default=None, ge=1, le=INT32_MAX)
    limits: list[PartnerLimit] = Field(default_factory=list, max_length=MAX_PARTNER_LIMITS)
    cost: PartnerCost = Field(default_factory=PartnerCost)
    by: Annotated[str, Matching(DATA_PATH)] | None = None
    backoff: Backoff | None = None

    def to_spec(self) -> PartnerSpec:
        backoff = self.backoff
        return PartnerSpec(
            id=self.id, concurrency=self.concurrency,
            limits=tuple(limit.to_spec() for limit in self.limits),
            cost_field=self.cost.estimate, cost_default=self.cost.default,
            cost_header=self.cost.header, by=self.by,
            backoff=None if backoff is None else backoff.to_spec())

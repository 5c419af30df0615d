"""What a queue's settings mean to the engine, throttlers and plugins: a frozen,
typed view built once per settings change.

The pydantic ``QueueConfig`` (``hipq.config``) is the edge: it parses YAML and API
bodies and reports what is wrong with them. Everything inside (throttling parts,
retry rules, plugins) gets a :class:`QueueSpec` (its retry settings a
:class:`RetrySpec`) instead: plain frozen dataclasses, no validation cost per tick,
and nothing a plugin could change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from hipq.jobs import DEFAULT_TIMEOUT_SECONDS, DeliveryStrategy, Ordering

# A time window: {"start": "HH:MM", "end": "HH:MM"} in the queue's (or job's) timezone.
Window = Mapping[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaSpec:
    """Each group (the value at ``field``, a dotted path into ``data``) gets at most
    ``floor(share x concurrency)`` units; unlisted groups share ``default`` (or what
    the listed shares leave)."""

    field: str
    shares: Mapping[str, float]
    default: float | None = None
    lend_unused: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimitSpec:
    """At most ``launches`` per sliding ``per_seconds``, per group ``by`` (a path into
    ``data``) or queue-wide."""

    launches: int
    per_seconds: float
    by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BackoffSpec:
    """How a throttled try pauses its scope (docs/throttling.md): ``scope`` ``queue`` or
    ``group`` (jobs sharing the value at ``field``); without a time from the partner
    the pause is ``initial_seconds`` doubling per throttled try in a row, up to
    ``max_seconds``; a time the partner gives pauses at most ``max_partner_seconds``;
    a job's try past ``max_throttled`` throttled in a row counts as failed. With
    ``learn`` (the default), a refusal that gives no time lowers the learned launch
    rate of the queue instead of pausing it (docs/throttling.md, "Partners")."""

    scope: str = "queue"
    field: str | None = None
    initial_seconds: float = 1.0
    max_seconds: float = 300.0
    max_partner_seconds: float = 3600.0
    max_throttled: int = 50
    learn: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class AdaptiveSpec:
    """AIMD on the effective concurrency: times ``decrease`` (not below ``min``) on a
    throttled or timed-out try, plus one after every ``increase_every`` successes."""

    min: int = 1
    increase_every: int = 20
    decrease: float = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrySpec:
    """How a queue retries a failed try: a built-in ``strategy`` (``None``: the
    default) or a ``plugin`` (``module:attr``), with its ``options`` (the config's
    ``options`` merged with its flat keys). ``options`` stays out of the repr: a
    value may be secret."""

    strategy: str | None = None
    plugin: str | None = None
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}),
                                       repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSpec:
    """A queue's settings as the engine and plugins see them.

    ``critical_concurrency`` is already resolved: unset in the config means the
    same as ``concurrency``.
    """

    id: str
    delivery_strategy: DeliveryStrategy = DeliveryStrategy.AT_LEAST_ONCE
    attempts: int = 3
    concurrency: int | None = None
    critical_concurrency: int | None = None
    ordering: Ordering = Ordering.TIME_THEN_PRIORITY
    aging_seconds: float | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    heartbeat_timeout_seconds: float | None = None
    default_weight: int = 1
    timezone: str = "UTC"
    time_windows: tuple[Window, ...] | None = None
    quotas: QuotaSpec | None = None
    rate_limit: RateLimitSpec | None = None
    backoff: BackoffSpec = field(default_factory=BackoffSpec)
    adaptive: AdaptiveSpec | None = None
    merge_by_ordering_key: bool = False
    ordering_key_mode: str = "strict"
    paused: bool = False
    custom_throttler: bool = False  # a plugin throttler: it gets deep copies of jobs
    retry: RetrySpec = field(default_factory=RetrySpec)

    @property
    def effective_critical_concurrency(self) -> int | None:
        """The same as ``critical_concurrency`` (kept for plugins written against
        the pydantic config, which had both)."""
        return self.critical_concurrency

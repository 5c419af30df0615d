"""The public plugin API (stable): throttlers and retry strategies.

A **throttler** decides, once per queue per tick, which due jobs to launch::

    class MyThrottler:
        def __init__(self, **options): ...
        def select(self, ctx: ThrottleContext) -> ThrottleResult: ...

A **retry strategy** decides what happens after a failed try::

    class MyRetry:
        def __init__(self, **options): ...
        def decide(self, ctx: RetryContext) -> Retry | GiveUp: ...

Both are pure and synchronous: they get a context carrying ``now`` and return a
decision. Jobs they see are deep copies (snapshots): mutating them changes
nothing stored. A plugin may also be a plain function taking the context.

Plugins are loaded from ``"module:attr"`` with their ``options`` as keyword
arguments. A plugin that raises is caught by the reconciler, logged and counted:
a throttler error launches nothing for that queue that tick; a retry strategy
error falls back to the built-in exponential strategy, so no job is lost or
failed because of a plugin bug.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from hipq.errors import ConfigError
from hipq.jobs import Job, JobError
from hipq.spec import QueueSpec, QuotaSpec, RateLimitSpec
from hipq.throttling import (
    DEFAULT_GROUP,
    CapacityPool,
    OrderingKeys,
    QuotaPlan,
    RateBudget,
    RunningUsage,
    effective_priority,
    field_value,
    group_of,
    is_open,
    next_open,
    windows_of,
)

__all__ = [
    "DEFAULT_GROUP",
    "CapacityPool",
    "GiveUp",
    "Job",
    "JobError",
    "OrderingKeys",
    "QueueSpec",
    "QuotaPlan",
    "QuotaSpec",
    "RateBudget",
    "RateLimitSpec",
    "Retry",
    "RetryContext",
    "RetryStrategy",
    "RunningUsage",
    "ThrottleContext",
    "ThrottleResult",
    "Throttler",
    "effective_priority",
    "field_value",
    "group_of",
    "is_open",
    "load_object",
    "next_open",
    "windows_of",
]

@dataclass(frozen=True, slots=True, kw_only=True)
class ThrottleContext:
    """What a throttler sees.

    Attributes:
        queue: the queue's settings (a frozen :class:`QueueSpec`).
        candidates: due jobs, in the queue's order, bounded (never the whole backlog).
        running: the queue's running jobs (their weights count against capacity).
            Listed on first use: a throttler that reads only ``usage`` costs nothing
            per running job.
        now: aware UTC datetime.
        recent_launches: for queues with a ``rate_limit``: launch times within the
            current window, per rate group (``""`` for a queue-wide limit; a value
            over 128 characters as :meth:`RateBudget.group` keys it).
        usage: what the running jobs hold, summed (:class:`RunningUsage`; its
            ``field_weights`` by the queue's quota field). ``None`` when the caller
            did not give it: :meth:`running_usage` then sums ``running``.
    """

    queue: QueueSpec
    candidates: Sequence[Job]
    running: Sequence[Job]
    now: datetime
    recent_launches: Mapping[str, Sequence[datetime]] = field(default_factory=dict)
    usage: RunningUsage | None = None

    def running_usage(self) -> RunningUsage:
        """``usage``, or the sums of ``running`` (by the queue's quota field)."""
        path = self.queue.quotas.field if self.queue.quotas is not None else None
        usage = self.usage
        if usage is None or (path is not None and usage.field_path != path):
            usage = RunningUsage.of(self.running, path)
        return usage


@dataclass(frozen=True, slots=True)
class ThrottleResult:
    """A throttler's decision.

    Attributes:
        launch: jobs chosen from ``ctx.candidates``, in launch order.
        reschedule: job id -> new ``run_at`` (e.g. a time window closed).
        drop: job id -> reason; the job is archived without launch
            (``expired`` for reason "expired", else ``failed`` with the reason).
        held: optional, job id -> why a candidate waits (``concurrency``,
            ``quota``, ``rate_limit``, ``ordering_key``, ``window``...): counted per
            reason on the queue (docs/throttling.md); a waiting candidate not listed counts
            as ``throttler``.
    Candidates in none of the three simply wait for a later tick.
    """

    launch: Sequence[Job] = ()
    reschedule: Mapping[str, datetime] = field(default_factory=dict)
    drop: Mapping[str, str] = field(default_factory=dict)
    held: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class Throttler(Protocol):
    def select(self, ctx: ThrottleContext) -> ThrottleResult:
        """Choose which candidates to launch now.

        Raises:
            Exception: any error is caught by the reconciler; nothing of this queue
                launches this tick.
        """
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryContext:
    """What a retry strategy sees: ``job`` is a defensive copy of the failed job
    (``job.attempt`` is the number of tries so far), ``error`` why the try failed."""

    job: Job
    error: JobError
    now: datetime


@dataclass(frozen=True, slots=True)
class Retry:
    """Try again at ``at``; ``data`` (if given) replaces the job's data."""

    at: datetime
    data: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Stop retrying: the job fails with ``reason``."""

    reason: str = "gave up"


@runtime_checkable
class RetryStrategy(Protocol):
    def decide(self, ctx: RetryContext) -> Retry | GiveUp:
        """Decide the fate of a failed try. ``max_attempts`` and ``retryable=False``
        are enforced before a strategy is asked, so a strategy need not check them."""
        ...


def load_object(path: str) -> Any:
    """Import ``"package.module:attr.sub"`` and return the attribute."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"plugin path {path!r} must look like 'package.module:attribute'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"plugin {path!r}: cannot import module {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"plugin {path!r}: module {module_name!r} has no "
                              f"attribute {attr!r}") from None
    return obj


def instantiate(path: str, options: Mapping[str, Any], method: str) -> Callable[[Any], Any]:
    """Load a plugin and return the callable that takes a context.

    A class is instantiated with ``**options`` and its ``method`` is returned; an
    object with ``method`` is used as is; a plain function is used as is (then
    ``options`` must be empty).
    """
    obj = load_object(path)
    if inspect.isclass(obj):
        try:
            obj = obj(**options)
        except TypeError as exc:
            raise ConfigError(f"plugin {path!r}: bad options "  # names only: values may be secret
                              f"({', '.join(map(str, options)) or 'none'}): {exc}") from None
        except Exception as exc:
            raise ConfigError(f"plugin {path!r}: failed to initialise: {exc!r}") from None
    bound = getattr(obj, method, None)
    if callable(bound):
        return bound  # type: ignore[no-any-return]
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        if options:
            raise ConfigError(f"plugin {path!r} is a function and takes no options")
        return obj
    raise ConfigError(f"plugin {path!r} has no {method}() method and is not a function")


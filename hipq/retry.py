"""Built-in retry strategies and the rules every strategy runs under.

``decide(queue, strategy, ctx)`` applies the rules that hold whatever the
strategy: ``max_attempts`` bounds all, ``retryable=False`` fails at once, and an
``at_most_once`` queue never retries a try whose outcome is unknown (``lost``,
``timeout``). Only then is the strategy asked. A downstream's ``Retry-After``
(carried as ``retry_after`` in the error's data: seconds, or an ISO 8601 time)
then moves the next try later if it asks for more than the strategy's delay,
never earlier, and by at most :data:`MAX_RETRY_AFTER_SECONDS`.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hipq.errors import ConfigError
from hipq.jobs import UNKNOWN_OUTCOME_KINDS, DeliveryStrategy
from hipq.plugins import GiveUp, Retry, RetryContext, instantiate
from hipq.spec import QueueSpec, RetrySpec
from hipq.values import json_problem, plugin_time, text_problem

log = logging.getLogger(__name__)

RetryFn = Callable[[RetryContext], Retry | GiveUp]


@dataclass(frozen=True, slots=True)
class Exponential:
    """``min(max, base * factor**(attempt-1))`` seconds, with full jitter by default."""

    base_seconds: float = 1.0
    factor: float = 2.0
    max_seconds: float = 300.0
    jitter: bool = True
    rng: Callable[[], float] = random.random

    def decide(self, ctx: RetryContext) -> Retry | GiveUp:
        exponent = max(ctx.job.attempt - 1, 0)
        ceiling = min(self.max_seconds, self.base_seconds * self.factor ** min(exponent, 64))
        delay = ceiling * self.rng() if self.jitter else ceiling
        return Retry(at=ctx.now + timedelta(seconds=delay))


@dataclass(frozen=True, slots=True)
class Fixed:
    """The same delay after every failed try."""

    delay_seconds: float = 10.0

    def decide(self, ctx: RetryContext) -> Retry | GiveUp:
        return Retry(at=ctx.now + timedelta(seconds=self.delay_seconds))


@dataclass(frozen=True, slots=True)
class NoRetry:
    def decide(self, ctx: RetryContext) -> Retry | GiveUp:
        return GiveUp("retry strategy 'none'")


@dataclass(frozen=True, slots=True)
class Lowkiq:
    """lowkiq's curve: ``count**4 + 15 + rand(30) * (count + 1)`` seconds."""

    rng: Callable[[int], int] = lambda n: random.randrange(n)

    def decide(self, ctx: RetryContext) -> Retry | GiveUp:
        count = max(ctx.job.attempt - 1, 0)
        delay = count**4 + 15 + self.rng(30) * (count + 1)
        return Retry(at=ctx.now + timedelta(seconds=delay))


BUILTIN_STRATEGIES: Mapping[str, type[Any]] = {
    "exponential": Exponential,
    "fixed": Fixed,
    "none": NoRetry,
    "lowkiq": Lowkiq,
}
DEFAULT_STRATEGY = "exponential"


def build_retry(spec: RetrySpec) -> RetryFn:
    """The decision function for a queue's retry settings.

    Raises:
        ConfigError: an unknown strategy or option, or a plugin that cannot be loaded.
    """
    options = spec.options
    if spec.plugin:
        return instantiate(spec.plugin, options, "decide")
    name = spec.strategy or DEFAULT_STRATEGY
    cls = BUILTIN_STRATEGIES.get(name)
    if cls is None:
        raise ConfigError(f"unknown retry strategy {name!r} "
                          f"(built-ins: {', '.join(sorted(BUILTIN_STRATEGIES))})")
    _check_options(name, options)
    strategy = cls(**options)
    return strategy.decide  # type: ignore[no-any-return]


# what a config may set on each built-in strategy: option -> (type, smallest value)
_OPTIONS: Mapping[str, Mapping[str, tuple[type, float]]] = {
    "exponential": {"base_seconds": (float, 0.0), "factor": (float, 1.0),
                    "max_seconds": (float, 0.0), "jitter": (bool, 0.0)},
    "fixed": {"delay_seconds": (float, 0.0)},
    "none": {},
    "lowkiq": {},
}
MAX_OPTION_SECONDS = 10 * 365 * 86400.0  # bounds every number (no overflow later)


def _check_options(name: str, options: Mapping[str, Any]) -> None:
    """``ConfigError`` naming the first bad option (names only: a value may be secret)."""
    allowed = _OPTIONS[name]
    for option, value in options.items():
        kind = allowed.get(str(option))
        if kind is None:
            raise ConfigError(f"retry strategy {name!r}: unknown option {str(option)[:100]!r} "
                              f"(it takes {', '.join(allowed) or 'none'})")
        expected, least = kind
        if expected is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"retry strategy {name!r}: {option} must be true or false")
            continue
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or not least <= value <= MAX_OPTION_SECONDS):
            raise ConfigError(f"retry strategy {name!r}: {option} must be a number from "
                              f"{least:g} to {MAX_OPTION_SECONDS:g}")


_FALLBACK = Exponential()
MAX_RETRY_AFTER_SECONDS = 86400.0  # a Retry-After further away than this is capped


def retry_after(ctx: RetryContext) -> datetime | None:
    """The earliest next try a downstream asked for (``Retry-After``), if any."""
    data = ctx.error.data
    return partner_time(data.get("retry_after") if isinstance(data, dict) else None, ctx.now)


def partner_time(raw: Any, now: datetime, *,
                 cap: float = MAX_RETRY_AFTER_SECONDS) -> datetime | None:
    """A time a partner gave (seconds from ``now`` as a number, or an aware ISO 8601
    time), at most ``cap`` seconds away (:data:`MAX_RETRY_AFTER_SECONDS` unless
    given; a pause's cap is ``backoff.max_partner_seconds``); None if there is none."""
    latest = now + timedelta(seconds=cap)
    if isinstance(raw, int | float) and not isinstance(raw, bool) and raw >= 0:
        if raw != raw:  # NaN
            return None
        return latest if raw >= cap else now + timedelta(seconds=float(raw))
    if isinstance(raw, str):
        try:
            when = datetime.fromisoformat(raw)
        except ValueError:
            return None
        return min(when, latest) if when.tzinfo is not None else None
    return None


def _honour_retry_after(decision: Retry | GiveUp, ctx: RetryContext) -> Retry | GiveUp:
    earliest = retry_after(ctx)
    if isinstance(decision, Retry) and earliest is not None and earliest > decision.at:
        return Retry(at=earliest, data=decision.data)
    return decision


def decide(queue: QueueSpec, strategy: RetryFn, ctx: RetryContext) -> Retry | GiveUp:
    """What to do after a failed try, under the rules every strategy obeys."""
    error = ctx.error
    if not error.retryable:
        return GiveUp(f"not retryable: {error.kind}")
    if ctx.job.attempt >= ctx.job.max_attempts:
        return GiveUp(f"max attempts ({ctx.job.max_attempts}) reached")
    if (queue.delivery_strategy is DeliveryStrategy.AT_MOST_ONCE
            and error.kind in UNKNOWN_OUTCOME_KINDS):
        return GiveUp(f"at_most_once queue: outcome of the try is unknown ({error.kind})")
    return _honour_retry_after(_ask(queue, strategy, ctx), ctx)


def _ask(queue: QueueSpec, strategy: RetryFn, ctx: RetryContext) -> Retry | GiveUp:
    try:
        decision = strategy(ctx)
    except Exception:
        log.exception("retry strategy of queue %s raised; using exponential backoff",
                      queue.id, extra={"action": "plugin_error", "queue": queue.id})
        return _FALLBACK.decide(ctx)
    checked = _checked(decision)
    if isinstance(checked, str):
        log.error("retry strategy of queue %s returned %s; using exponential backoff",
                  queue.id, checked, extra={"action": "plugin_error", "queue": queue.id})
        return _FALLBACK.decide(ctx)
    return checked


def _checked(decision: object) -> Retry | GiveUp | str:
    """A strategy's decision as the store can keep it (its time in UTC), or what is
    wrong with it: an error in a plugin (docs/configuration.md, "Plugins"), which must not reach
    step 3's one transaction."""
    if isinstance(decision, GiveUp):
        if not isinstance(decision.reason, str) or text_problem(decision.reason):
            return f"a give-up whose reason is not plain text ({decision.reason!r:.100})"
        return decision
    if not isinstance(decision, Retry):
        return f"{decision!r:.200}, not a Retry or a GiveUp"
    at = plugin_time(decision.at)
    if at is None:
        return f"a retry at {decision.at!r:.100}, not a time"
    if decision.data is not None:
        problem = (json_problem(decision.data) if isinstance(decision.data, dict)
                   else "the data is not an object")
        if problem is not None:
            return f"a retry with data that cannot be stored ({problem})"
    return decision if at is decision.at else Retry(at=at, data=decision.data)

"""Prometheus metrics of one daemon (docs/operations.md), through ``prometheus-client``.

The daemon counts in plain dictionaries (:class:`Tally`, :class:`BulkHistogram`);
``prometheus-client`` is imported at the first scrape (or the first call of
:func:`hipq.metrics_export.registry_of`), which builds the daemon's registry on
them: a daemon nobody scrapes never loads it (about 1 MB). This module knows
nothing of the library; :mod:`hipq.metrics_export` reads the counts from here.
Each daemon has its own registry (tests run several daemons in one process).
Counters count what this daemon did and are fed once per tick from the tick's
:class:`~hipq.engine.ReconcileResult` (the jobs it launched and the changes it
persisted ride on the result by reference), so the hot path pays nothing per job:
the daemon aggregates per queue after the tick with a few dictionary updates.
Gauges come from the store's per-queue counts, read at most once every
``GAUGE_CACHE_SECONDS`` whatever the scrape rate, with the partner's word on each
queue (docs/throttling.md) as its owner stored it: the scopes paused now
(``hipq_backoff_active``), throttled tries (``hipq_throttled_total``, a counter
kept by the owners in the database, so every daemon shows the same), the
concurrency in force (``hipq_queue_effective_concurrency``, queues with a
concurrency only) and the due jobs held back at the last tick by reason
(``hipq_queue_held_jobs``). The intake (docs/from-your-database.md) shows from the
same read: rows not ingested yet (``hipq_intake_pending``) and rows rejected at ingest
and kept with their error (``hipq_intake_rejected_total``, the rows in the table:
deleting them reads as a counter reset), for every queue and for at most
:data:`INTAKE_OTHER_QUEUES` names of queues that do not exist (the rest under
``queue="(other)"``, which no queue id can be).

Outcomes (``hipq_job_outcomes_total{outcome}``) count each ended try or job once:
``succeeded``, ``cancelled``; a try that ``timeout``-ed or was ``lost`` counts
under that name whether it is retried or not, and one the partner ``throttled``
(docs/throttling.md: given back, or past ``backoff.max_throttled``) under that name; any
other failed try counts as
``retried`` or (the job gave up) ``failed``; a job that expired before launch
counts as ``expired``.
"""

from __future__ import annotations

import asyncio
import bisect
import re
import time
from collections import Counter as Counted
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING

from hipq.config import QUEUE_ID_PATTERN
from hipq.store import ChangeKind, QueueStats

if TYPE_CHECKING:
    from hipq.engine import ReconcileResult

GAUGE_CACHE_SECONDS = 2.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
DELAY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
                 3600.0)
OUTCOMES = ("succeeded", "failed", "retried", "expired", "cancelled", "timeout", "lost",
            "throttled")
RESPONSE_OUTCOMES = ("applied", "duplicate", "stale", "late", "unmatched")
HELD_REASONS = ("concurrency", "quota", "window", "rate_limit", "backoff", "ordering_key",
                "throttler", "partner")  # docs/throttling.md; each shown per queue (0 if none)
INTAKE_OTHER_QUEUES = 20  # names of unknown queues shown in the intake metrics, at most
OTHER_QUEUE = "(other)"
_QUEUE_ID = re.compile(QUEUE_ID_PATTERN)
_BY_ERROR = {"timeout": "timeout", "lost": "lost", "throttled": "throttled"}
_FAILED = frozenset({"failed", "retried", "timeout", "lost"})


def _now() -> float:
    """Wall time of a label set's first count: its ``_created`` sample, as
    ``prometheus_client``'s own counters show it."""
    return time.time()  # noqa: TID251 (a timestamp for Prometheus, not the daemon's clock)


class Tally:
    """A labelled counter in a dictionary: ``inc(("queue", "outcome"), n)``, and
    ``labels(...).inc(n)`` as ``prometheus_client``'s counters spell it."""

    __slots__ = ("created", "documentation", "label_names", "name", "values")

    def __init__(self, name: str, documentation: str, label_names: Sequence[str]) -> None:
        self.name, self.documentation = name, documentation
        self.label_names = tuple(label_names)
        self.values: dict[tuple[str, ...], float] = {}
        self.created: dict[tuple[str, ...], float] = {}

    def inc(self, key: tuple[str, ...], amount: float = 1) -> None:
        values = self.values
        if key in values:
            values[key] += amount
        else:
            values[key] = amount
            self.created[key] = _now()

    def labels(self, *values: str) -> _TallyChild:
        key = tuple(map(str, values))
        if len(key) != len(self.label_names):
            raise ValueError(f"{self.name}: expected labels {self.label_names}, got {values}")
        if key not in self.values:
            self.inc(key, 0)
        return _TallyChild(self, key)


@dataclass(frozen=True, slots=True)
class _TallyChild:
    tally: Tally
    key: tuple[str, ...]

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        self.tally.inc(self.key, amount)


class BulkHistogram:
    """A histogram, labelled by one label (or none: ``label`` None), fed many values
    at once (one bisect per value, no lock per value)."""

    def __init__(self, name: str, documentation: str, label: str | None,
                 buckets: Sequence[float]) -> None:
        self.name, self.documentation, self.label = name, documentation, label
        self.bounds = list(buckets)
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}
        self.created = _now()
        if label is None:  # shown from the first scrape, zeros until observed
            self.counts[""], self.sums[""] = [0] * (len(self.bounds) + 1), 0.0

    def observe_many(self, label: str, values: Iterable[tuple[float, int]]) -> None:
        """Observe each ``(value, times)``."""
        counts = self.counts.get(label)
        if counts is None:
            counts = self.counts[label] = [0] * (len(self.bounds) + 1)
            self.sums[label] = 0.0
        total = 0.0
        for value, times in values:
            counts[bisect.bisect_left(self.bounds, value)] += times
            total += value * times
        self.sums[label] += total


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueWord:
    """The partner's word on one queue (docs/throttling.md) at one now, as the gauges show it."""

    queue: str
    paused_scopes: int = 0  # the partner's pauses in force
    throttled_total: int = 0
    effective_concurrency: int | None = None
    held: Mapping[str, int] = field(default_factory=dict)
    learned_rate: float | None = None  # launches a second, learned from refusals


@dataclass(frozen=True, slots=True, kw_only=True)
class PartnerGauge:
    """A declared partner as the owner of its queues last wrote it (docs/http-api.md,
    "Partners"): each bucket's room by name (``requests_per_60s``), the weight in
    flight, the learned rate (None: nothing learned)."""

    partner: str
    remaining: Mapping[str, float] = field(default_factory=dict)
    in_flight: int = 0
    learned_rate: float | None = None


IntakeCounts = Mapping[str, tuple[int, int]]  # (pending, rejected) rows by queue
GaugeReading = tuple[Sequence[QueueStats], Sequence[QueueWord], IntakeCounts,
                     Sequence[PartnerGauge]]


@dataclass(slots=True)
class QueueGauges:
    """The last cached per-queue counts, the partner's word on each queue and the
    intake's rows: the ``hipq_queue_*``, partner and intake gauges."""

    stats: Sequence[QueueStats] = ()
    words: Sequence[QueueWord] = ()
    intake: IntakeCounts = field(default_factory=dict)
    partners: Sequence[PartnerGauge] = ()  # the declared partners


def intake_by_label(known: Sequence[str], counts: IntakeCounts) -> dict[str, tuple[int, int]]:
    """The intake's (pending, rejected) rows by queue label: every known queue (0 when
    none), the first :data:`INTAKE_OTHER_QUEUES` other names that could be queue ids,
    and the rest summed under :data:`OTHER_QUEUE`."""
    out = {queue: counts.get(queue, (0, 0)) for queue in known}
    named = 0
    for queue in sorted(set(counts) - set(out)):
        label = OTHER_QUEUE
        if named < INTAKE_OTHER_QUEUES and _QUEUE_ID.fullmatch(queue):
            label, named = queue, named + 1
        seen, (pending, rejected) = out.get(label, (0, 0)), counts[queue]
        out[label] = (seen[0] + pending, seen[1] + rejected)
    return out


class Metrics:
    """The metrics of one daemon."""

    def __init__(self, *, monotonic: Callable[[], float]) -> None:
        self._monotonic = monotonic
        self.enqueued = Tally("hipq_jobs_enqueued", "Jobs created through this daemon "
                              "(idempotent repeats not counted)", ["queue"])
        self.launches = Tally("hipq_launches", "Tries launched by this daemon", ["queue"])
        self.outcomes = Tally("hipq_job_outcomes", "Ended tries and jobs by outcome: "
                              + ", ".join(OUTCOMES), ["queue", "outcome"])
        self.responses = Tally("hipq_responses", "Responses classified by this daemon: "
                               + ", ".join(RESPONSE_OUTCOMES), ["outcome"])
        self.tick = BulkHistogram("hipq_tick_duration_seconds", "Duration of one reconcile "
                                  "tick", None, TICK_BUCKETS)
        self.launch_delay = BulkHistogram("hipq_launch_delay_seconds", "From due (run_at) to "
                                          "launched, per launched try", "queue", DELAY_BUCKETS)
        self.gauges = QueueGauges()
        self._stats_at: float | None = None
        self._refreshing: asyncio.Lock | None = None
        for outcome in RESPONSE_OUTCOMES:
            self.responses.inc((outcome,), 0)  # every family shows from the first scrape

    # -- fed by the daemon ----------------------------------------------------------

    def enqueued_jobs(self, queue: str, count: int) -> None:
        if count:
            self.enqueued.inc((queue,), count)

    def observe_tick(self, result: ReconcileResult, seconds: float) -> int:
        """The totals of one tick (called once per tick, after it); returns how many
        tries failed in it (the daemon logs them only then)."""
        self.tick.observe_many("", ((seconds, 1),))
        failed = 0
        outcomes = self.outcomes
        for key, n in _outcomes(result).items():
            outcomes.inc(key, n)
            if key[1] in _FAILED:
                failed += n
        # a tick launches at one time, and jobs enqueued together share run_at: count
        # the distinct (queue, run_at, launched_at) in C, then do the arithmetic per key
        delays: dict[str, list[tuple[float, int]]] = {}
        for (queue, run_at, launched_at), n in Counted(
                map(_LAUNCH_KEY, result.launched_jobs)).items():
            delay = 0.0 if launched_at is None else (launched_at - run_at).total_seconds()
            delays.setdefault(queue, []).append((max(delay, 0.0), n))
        for queue, values in delays.items():
            self.launches.inc((queue,), sum(n for _, n in values))
            self.launch_delay.observe_many(queue, values)
        if result.responses_applied:
            self.responses.inc(("applied",), result.responses_applied)
        for outcome, n in result.responses_by_outcome.items():
            self.responses.inc((outcome,), n)
        return failed

    def outcome_totals(self) -> dict[tuple[str, str], float]:
        """``hipq_job_outcomes_total`` by (queue, outcome), as counted so far."""
        return {(key[0], key[1]): value for key, value in self.outcomes.values.items()}

    # -- served at /metrics -----------------------------------------------------------

    async def refresh_gauges(self, read: Callable[[], Awaitable[GaugeReading]]) -> None:
        """Read the per-queue counts and the partner's word with ``read`` unless they
        are under ``GAUGE_CACHE_SECONDS`` old; concurrent scrapes share one read."""
        if self._refreshing is None:
            self._refreshing = asyncio.Lock()
        async with self._refreshing:
            if (self._stats_at is None
                    or self._monotonic() - self._stats_at >= GAUGE_CACHE_SECONDS):
                (self.gauges.stats, self.gauges.words, self.gauges.intake,
                 self.gauges.partners) = await read()
                self._stats_at = self._monotonic()


def _outcomes(result: ReconcileResult) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    extend, requeue = ChangeKind.EXTEND.value, ChangeKind.REQUEUE.value
    for (queue, kind, status, error), n in Counted(map(_ENDED_KEY, result.ended)).items():
        if kind == extend:
            continue
        outcome = _BY_ERROR.get(error or "")
        if outcome is None:
            outcome = "retried" if kind == requeue else status or "failed"
        out[(queue, outcome)] = out.get((queue, outcome), 0) + n
    for queue, n in result.expired_by_queue.items():
        out[(queue, "expired")] = out.get((queue, "expired"), 0) + n
    return out


# counted in C (map, attrgetter, Counter): no Python per ended or launched job
_ENDED_KEY = attrgetter("queue", "kind._value_", "status", "outcome")
_LAUNCH_KEY = attrgetter("queue", "run_at", "launched_at")


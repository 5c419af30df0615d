"""Prometheus metrics of one daemon (docs/operations.md), through ``prometheus-client``.

Each daemon has its own registry (tests run several daemons in one process).
Counters count what this daemon did and are fed once per tick from the tick's
:class:`~hipq.engine.ReconcileResult` (the jobs it launched and the changes it
persisted ride on the result by reference), so the hot path pays nothing per job:
the daemon aggregates per queue after the tick with a few dictionary updates.
Gauges come from the store's per-queue counts, read at most once every
``GAUGE_CACHE_SECONDS`` whatever the scrape rate, with the partner's word on each
queue (SPEC 15) as its owner stored it: the scopes paused now
(``hipq_backoff_active``), throttled tries (``hipq_throttled_total``, a counter
kept by the owners in the database, so every daemon shows the same), the
concurrency in force (``hipq_queue_effective_concurrency``, queues with a
concurrency only) and the due jobs held back at the last tick by reason
(``hipq_queue_held_jobs``). The intake (SPEC 16: enqueue from SQL) shows from the
same read: rows not ingested yet (``hipq_intake_pending``) and rows rejected at ingest
and kept with their error (``hipq_intake_rejected_total``, the rows in the table:
deleting them reads as a counter reset), for every queue and for at most
:data:`INTAKE_OTHER_QUEUES` names of queues that do not exist (the rest under
``queue="(other)"``, which no queue id can be).

Outcomes (``hipq_job_outcomes_total{outcome}``) count each ended try or job once:
``succeeded``, ``cancelled``; a try that ``timeout``-ed or was ``lost`` counts
under that name whether it is retried or not, and one the partner ``throttled``
(SPEC 15: given back, or past ``backoff.max_throttled``) under that name; any
other failed try counts as
``retried`` or (the job gave up) ``failed``; a job that expired before launch
counts as ``expired``.
"""

from __future__ import annotations

import asyncio
import bisect
import re
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

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
                "throttler")  # SPEC 15; each shown per queue (0 when none)
INTAKE_OTHER_QUEUES = 20  # names of unknown queues shown in the intake metrics, at most
OTHER_QUEUE = "(other)"
_QUEUE_ID = re.compile(QUEUE_ID_PATTERN)
_BY_ERROR = {"timeout": "timeout", "lost": "lost", "throttled": "throttled"}
_FAILED = frozenset({"failed", "retried", "timeout", "lost"})


class BulkHistogram(Collector):
    """A labelled histogram fed many values at once (one bisect per value, no lock
    per value): ``prometheus_client.Histogram`` takes a lock per observation."""

    def __init__(self, name: str, documentation: str, label: str,
                 buckets: Sequence[float]) -> None:
        self.name, self.documentation, self.label = name, documentation, label
        self.bounds = list(buckets)
        self._counts: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}

    def observe_many(self, label: str, values: Iterable[tuple[float, int]]) -> None:
        """Observe each ``(value, times)``."""
        counts = self._counts.get(label)
        if counts is None:
            counts = self._counts[label] = [0] * (len(self.bounds) + 1)
            self._sums[label] = 0.0
        total = 0.0
        for value, times in values:
            counts[bisect.bisect_left(self.bounds, value)] += times
            total += value * times
        self._sums[label] += total

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=[self.label])
        for label, counts in sorted(self._counts.items()):
            cumulative, running = [], 0
            for bound, count in zip([*map(str, self.bounds), "+Inf"], counts, strict=True):
                running += count
                cumulative.append((bound, float(running)))
            family.add_metric([label], cumulative, self._sums[label])
        yield family


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueWord:
    """The partner's word on one queue (SPEC 15) at one now, as the gauges show it."""

    queue: str
    paused_scopes: int = 0  # the partner's pauses in force
    throttled_total: int = 0
    effective_concurrency: int | None = None
    held: Mapping[str, int] = field(default_factory=dict)


IntakeCounts = Mapping[str, tuple[int, int]]  # (pending, rejected) rows by queue
GaugeReading = tuple[Sequence[QueueStats], Sequence[QueueWord], IntakeCounts]


class QueueGauges(Collector):
    """``hipq_queue_*`` gauges from the last cached per-queue counts, and the
    partner's word on each queue."""

    def __init__(self) -> None:
        self.stats: Sequence[QueueStats] = []
        self.words: Sequence[QueueWord] = []
        self.intake: IntakeCounts = {}

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("hipq_queue_jobs", "Jobs of a queue by state (queued: all "
                                 "waiting; due: waiting and due now; running)",
                                 labels=["queue", "state"])
        weight = GaugeMetricFamily("hipq_queue_running_weight",
                                   "Capacity taken by the running jobs of a queue",
                                   labels=["queue"])
        lag = GaugeMetricFamily("hipq_queue_lag_seconds", "How long the oldest due job of a "
                                "queue has waited (0 when none is due)", labels=["queue"])
        for s in self.stats:
            for state in ("queued", "due", "running"):
                jobs.add_metric([s.queue, state], getattr(s, state))
            weight.add_metric([s.queue], s.running_weight)
            lag.add_metric([s.queue], s.oldest_due_age_seconds or 0.0)
        yield from (jobs, weight, lag)
        yield from self._partner()
        yield from self._intake()

    def _partner(self) -> Iterator[Metric]:
        active = GaugeMetricFamily("hipq_backoff_active", "Scopes of a queue (the queue, or "
                                   "groups) paused by its partner now", labels=["queue"])
        throttled = CounterMetricFamily("hipq_throttled", "Throttled tries of a queue (the "
                                        "partner said not now), counted by its owners",
                                        labels=["queue"])
        effective = GaugeMetricFamily("hipq_queue_effective_concurrency", "The concurrency "
                                      "in force: the adaptive limit, else the configured one",
                                      labels=["queue"])
        held = GaugeMetricFamily("hipq_queue_held_jobs", "Due jobs held back at the last "
                                 "tick of a queue, by reason", labels=["queue", "reason"])
        for w in self.words:
            active.add_metric([w.queue], w.paused_scopes)
            throttled.add_metric([w.queue], w.throttled_total)
            if w.effective_concurrency is not None:
                effective.add_metric([w.queue], w.effective_concurrency)
            for reason in (*HELD_REASONS, *sorted(set(w.held) - set(HELD_REASONS))):
                held.add_metric([w.queue, reason], w.held.get(reason, 0))
        yield from (active, throttled, effective, held)

    def _intake(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily("hipq_intake_pending", "Jobs of a queue enqueued from "
                                    "SQL that its owner has not ingested yet",
                                    labels=["queue"])
        rejected = CounterMetricFamily("hipq_intake_rejected", "Rows enqueued from SQL that "
                                       "were rejected at ingest, kept with their error (GET "
                                       "/v1/intake?status=rejected)", labels=["queue"])
        for queue, (waiting, refused) in intake_by_label(
                [s.queue for s in self.stats], self.intake).items():
            pending.add_metric([queue], waiting)
            rejected.add_metric([queue], refused)
        yield from (pending, rejected)


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
        self.registry = CollectorRegistry(auto_describe=True)
        self._monotonic = monotonic
        r = self.registry
        self.enqueued = Counter("hipq_jobs_enqueued", "Jobs created through this daemon "
                                "(idempotent repeats not counted)", ["queue"], registry=r)
        self.launches = Counter("hipq_launches", "Tries launched by this daemon", ["queue"],
                                registry=r)
        self.outcomes = Counter("hipq_job_outcomes", "Ended tries and jobs by outcome: "
                                + ", ".join(OUTCOMES), ["queue", "outcome"], registry=r)
        self.responses = Counter("hipq_responses", "Responses classified by this daemon: "
                                 + ", ".join(RESPONSE_OUTCOMES), ["outcome"], registry=r)
        self.tick = Histogram("hipq_tick_duration_seconds", "Duration of one reconcile tick",
                              buckets=TICK_BUCKETS, registry=r)
        self.launch_delay = BulkHistogram("hipq_launch_delay_seconds", "From due (run_at) to "
                                          "launched, per launched try", "queue", DELAY_BUCKETS)
        r.register(self.launch_delay)
        self.gauges = QueueGauges()
        r.register(self.gauges)
        self._stats_at: float | None = None
        self._refreshing: asyncio.Lock | None = None
        for outcome in RESPONSE_OUTCOMES:
            self.responses.labels(outcome)  # every family shows from the first scrape

    # -- fed by the daemon ----------------------------------------------------------

    def enqueued_jobs(self, queue: str, count: int) -> None:
        if count:
            self.enqueued.labels(queue).inc(count)

    def observe_tick(self, result: ReconcileResult, seconds: float) -> int:
        """The totals of one tick (called once per tick, after it); returns how many
        tries failed in it (the daemon logs them only then)."""
        self.tick.observe(seconds)
        failed = 0
        for (queue, outcome), n in _outcomes(result).items():
            self.outcomes.labels(queue, outcome).inc(n)
            if outcome in _FAILED:
                failed += n
        # a tick launches at one time, and jobs enqueued together share run_at: count
        # the distinct (queue, run_at, launched_at) in C, then do the arithmetic per key
        delays: dict[str, list[tuple[float, int]]] = {}
        for (queue, run_at, launched_at), n in Tally(
                map(_LAUNCH_KEY, result.launched_jobs)).items():
            delay = 0.0 if launched_at is None else (launched_at - run_at).total_seconds()
            delays.setdefault(queue, []).append((max(delay, 0.0), n))
        for queue, values in delays.items():
            self.launches.labels(queue).inc(sum(n for _, n in values))
            self.launch_delay.observe_many(queue, values)
        if result.responses_applied:
            self.responses.labels("applied").inc(result.responses_applied)
        for outcome, n in result.responses_by_outcome.items():
            self.responses.labels(outcome).inc(n)
        return failed

    # -- served at /metrics -----------------------------------------------------------

    async def refresh_gauges(self, read: Callable[[], Awaitable[GaugeReading]]) -> None:
        """Read the per-queue counts and the partner's word with ``read`` unless they
        are under ``GAUGE_CACHE_SECONDS`` old; concurrent scrapes share one read."""
        if self._refreshing is None:
            self._refreshing = asyncio.Lock()
        async with self._refreshing:
            if (self._stats_at is None
                    or self._monotonic() - self._stats_at >= GAUGE_CACHE_SECONDS):
                self.gauges.stats, self.gauges.words, self.gauges.intake = await read()
                self._stats_at = self._monotonic()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _outcomes(result: ReconcileResult) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    extend, requeue = ChangeKind.EXTEND.value, ChangeKind.REQUEUE.value
    for (queue, kind, status, error), n in Tally(map(_ENDED_KEY, result.ended)).items():
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


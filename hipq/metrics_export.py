"""The Prometheus side of :class:`hipq.metrics.Metrics`: its registry, made through
``prometheus-client`` at the first scrape (this module is imported then, and the
library with it), one per :class:`~hipq.metrics.Metrics` (tests run several daemons
in one process), and the text a scrape gets (:func:`render`). One collector reads
the daemon's counts as they are at each scrape, in the order and with the names,
HELP lines and ``_created`` samples ``prometheus_client``'s own ``Counter`` and
``Histogram`` would show (``PROMETHEUS_DISABLE_CREATED_SERIES=true`` leaves the
``_created`` samples out, as it does for those)."""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from hipq.metrics import HELD_REASONS, BulkHistogram, Metrics, QueueGauges, Tally, intake_by_label

_REGISTRIES: weakref.WeakKeyDictionary[Metrics, CollectorRegistry] = weakref.WeakKeyDictionary()


def registry_of(metrics: Metrics) -> CollectorRegistry:
    """The ``prometheus_client`` registry of ``metrics``, made at the first call."""
    registry = _REGISTRIES.get(metrics)
    if registry is None:
        registry = _REGISTRIES[metrics] = CollectorRegistry(auto_describe=True)
        registry.register(MetricsCollector(metrics))
    return registry


def render(metrics: Metrics) -> bytes:
    """The text exposition of ``metrics``, as ``GET /metrics`` serves it."""
    return generate_latest(registry_of(metrics))


def _created_series() -> bool:
    return os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() != "true"


class MetricsCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m, created = self.metrics, _created_series()
        for tally in (m.enqueued, m.launches, m.outcomes, m.responses):
            yield counter_family(tally, created)
        yield histogram_family(m.tick, created)
        yield histogram_family(m.launch_delay, False)
        yield from queue_families(m.gauges)


def counter_family(tally: Tally, created: bool) -> Metric:
    family = CounterMetricFamily(tally.name, tally.documentation, labels=tally.label_names)
    for key, value in tally.values.items():
        family.add_metric(key, value, created=tally.created[key] if created else None)
    return family


def histogram_family(histogram: BulkHistogram, created: bool) -> Metric:
    """``created``: the one ``_created`` sample of a histogram without labels."""
    labels = [] if histogram.label is None else [histogram.label]
    family = HistogramMetricFamily(histogram.name, histogram.documentation, labels=labels)
    for label, counts in sorted(histogram.counts.items()):
        cumulative, running = [], 0
        for bound, count in zip([*map(str, histogram.bounds), "+Inf"], counts, strict=True):
            running += count
            cumulative.append((bound, float(running)))
        family.add_metric([] if histogram.label is None else [label], cumulative,
                          histogram.sums[label])
    if created and histogram.label is None:
        family.add_sample(f"{histogram.name}_created", {}, histogram.created)
    return family


def queue_families(gauges: QueueGauges) -> Iterator[Metric]:
    """``hipq_queue_*`` gauges from the last cached per-queue counts, the partner's
    word on each queue, and the intake."""
    jobs = GaugeMetricFamily("hipq_queue_jobs", "Jobs of a queue by state (queued: all "
                             "waiting; due: waiting and due now; running)",
                             labels=["queue", "state"])
    weight = GaugeMetricFamily("hipq_queue_running_weight",
                               "Capacity taken by the running jobs of a queue",
                               labels=["queue"])
    lag = GaugeMetricFamily("hipq_queue_lag_seconds", "How long the oldest due job of a "
                            "queue has waited (0 when none is due)", labels=["queue"])
    for s in gauges.stats:
        for state in ("queued", "due", "running"):
            jobs.add_metric([s.queue, state], getattr(s, state))
        weight.add_metric([s.queue], s.running_weight)
        lag.add_metric([s.queue], s.oldest_due_age_seconds or 0.0)
    yield from (jobs, weight, lag)
    yield from _partner(gauges)
    yield from _intake(gauges)
    yield from _partners(gauges)


def _partner(gauges: QueueGauges) -> Iterator[Metric]:
    active = GaugeMetricFamily("hipq_backoff_active", "Scopes of a queue (the queue, or "
                               "groups) paused by its partner now", labels=["queue"])
    throttled = CounterMetricFamily("hipq_throttled", "Throttled tries of a queue (the "
                                    "partner said not now), counted by its owners",
                                    labels=["queue"])
    effective = GaugeMetricFamily("hipq_queue_effective_concurrency", "The concurrency "
                                  "in force: the adaptive limit, else the configured one",
                                  labels=["queue"])
    learned = GaugeMetricFamily("hipq_queue_learned_rate", "The launch rate a queue's "
                                "owner learned from refusals that gave no time, a second "
                                "(absent: no learned limit)", labels=["queue"])
    held = GaugeMetricFamily("hipq_queue_held_jobs", "Due jobs held back at the last "
                             "tick of a queue, by reason", labels=["queue", "reason"])
    for w in gauges.words:
        active.add_metric([w.queue], w.paused_scopes)
        throttled.add_metric([w.queue], w.throttled_total)
        if w.effective_concurrency is not None:
            effective.add_metric([w.queue], w.effective_concurrency)
        if w.learned_rate is not None:
            learned.add_metric([w.queue], round(w.learned_rate, 3))
        for reason in (*HELD_REASONS, *sorted(set(w.held) - set(HELD_REASONS))):
            held.add_metric([w.queue, reason], w.held.get(reason, 0))
    yield from (active, throttled, effective, learned, held)


def _intake(gauges: QueueGauges) -> Iterator[Metric]:
    pending = GaugeMetricFamily("hipq_intake_pending", "Jobs of a queue enqueued from "
                                "SQL that its owner has not ingested yet",
                                labels=["queue"])
    rejected = CounterMetricFamily("hipq_intake_rejected", "Rows enqueued from SQL that "
                                   "were rejected at ingest, kept with their error (GET "
                                   "/v1/intake?status=rejected)", labels=["queue"])
    for queue, (waiting, refused) in intake_by_label(
            [s.queue for s in gauges.stats], gauges.intake).items():
        pending.add_metric([queue], waiting)
        rejected.add_metric([queue], refused)
    yield from (pending, rejected)


def _partners(gauges: QueueGauges) -> Iterator[Metric]:
    """The declared partners, each whole (never per key: the labels stay bounded)."""
    remaining = GaugeMetricFamily("hipq_partner_budget_remaining", "What a partner's "
                                  "bucket has left (requests or cost) as the owner of its "
                                  "queues last wrote it; with by, the fullest key's",
                                  labels=["partner", "bucket"])
    in_flight = GaugeMetricFamily("hipq_partner_in_flight", "The weight in flight through "
                                  "a partner, every queue and key together", labels=["partner"])
    learned = GaugeMetricFamily("hipq_partner_learned_rate", "The launch rate learned of a "
                                "partner from refusals that gave no time, a second (absent: "
                                "nothing learned)", labels=["partner"])
    for p in gauges.partners:
        for bucket, room in p.remaining.items():
            remaining.add_metric([p.partner, bucket], room)
        in_flight.add_metric([p.partner], p.in_flight)
        if p.learned_rate is not None:
            learned.add_metric([p.partner], p.learned_rate)
    yield from (remaining, in_flight, learned)

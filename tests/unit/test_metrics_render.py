"""hipq's counters (hipq/metrics.py: dictionaries, prometheus_client imported at the
first scrape) render as prometheus_client's own ``Counter`` and ``Histogram`` fed
the same values would: names, HELP and TYPE lines, label sets, values, the
``_created`` samples (and none with ``PROMETHEUS_DISABLE_CREATED_SERIES=true``)."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from hipq.metrics import TICK_BUCKETS, Metrics
from hipq.metrics_export import registry_of, render

_CREATED = re.compile(r"^(\w+_created(?:\{[^}]*\})?) [0-9.e+]+$", re.MULTILINE)


def _text(data: bytes) -> str:
    return _CREATED.sub(r"\1 T", data.decode())


def _reference() -> bytes:
    registry = CollectorRegistry(auto_describe=True)
    enqueued = Counter("hipq_jobs_enqueued", "Jobs created through this daemon "
                       "(idempotent repeats not counted)", ["queue"], registry=registry)
    Counter("hipq_launches", "Tries launched by this daemon", ["queue"], registry=registry)
    outcomes = Counter("hipq_job_outcomes", "Ended tries and jobs by outcome: succeeded, "
                       "failed, retried, expired, cancelled, timeout, lost, throttled",
                       ["queue", "outcome"], registry=registry)
    responses = Counter("hipq_responses", "Responses classified by this daemon: applied, "
                        "duplicate, stale, late, unmatched", ["outcome"], registry=registry)
    tick = Histogram("hipq_tick_duration_seconds", "Duration of one reconcile tick",
                     buckets=TICK_BUCKETS, registry=registry)
    for outcome in ("applied", "duplicate", "stale", "late", "unmatched"):
        responses.labels(outcome)
    enqueued.labels("a").inc(3)
    enqueued.labels("b").inc(2)
    outcomes.labels("a", "succeeded").inc(4)
    responses.labels("late").inc()
    tick.observe(0.004)
    tick.observe(0.3)
    return generate_latest(registry)


def _ours() -> Metrics:
    metrics = Metrics(monotonic=lambda: 0.0)
    metrics.enqueued_jobs("a", 3)
    metrics.enqueued_jobs("b", 2)
    metrics.enqueued_jobs("c", 0)  # nothing enqueued: no label set
    metrics.outcomes.labels("a", "succeeded").inc(4)
    metrics.responses.inc(("late",))
    metrics.tick.observe_many("", [(0.004, 1), (0.3, 1)])
    return metrics


def _before_the_gauges(text: str) -> str:
    return text.split("# HELP hipq_launch_delay_seconds")[0]


def test_the_counters_render_as_prometheus_clients_own() -> None:
    ours = _before_the_gauges(_text(render(_ours())))
    assert ours == _text(_reference())


def test_without_created_series(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROMETHEUS_DISABLE_CREATED_SERIES", "true")
    text = render(_ours()).decode()
    assert "_created" not in text
    assert 'hipq_jobs_enqueued_total{queue="a"} 3.0' in text


def test_outcome_totals_and_labels() -> None:
    metrics = _ours()
    assert metrics.outcome_totals() == {("a", "succeeded"): 4}
    with pytest.raises(ValueError, match="labels"):
        metrics.outcomes.labels("a")
    with pytest.raises(ValueError, match="non-negative"):
        metrics.outcomes.labels("a", "failed").inc(-1)
    assert registry_of(metrics) is registry_of(metrics)  # made once

"""The dashboard's outcome history (hipq/api/outcome_history.py): what the outcome
counters grew by lands in the minute of the sample; the window is the last hour,
every minute of it, oldest first; old minutes fall out; a daemon without metrics
keeps nothing. Driven by a fake clock, without a database."""

from __future__ import annotations

from datetime import timedelta

from hipq.api.outcome_history import KEPT_MINUTES, OutcomeHistory
from hipq.metrics import Metrics
from hipq.testing import FakeClock


def _history() -> tuple[OutcomeHistory, Metrics, FakeClock]:
    clock = FakeClock()
    metrics = Metrics(monotonic=clock.monotonic)
    return OutcomeHistory(metrics, clock), metrics, clock


def test_outcomes_land_in_the_minute_they_were_sampled() -> None:
    history, metrics, clock = _history()
    history.sample()
    metrics.outcomes.labels("a", "succeeded").inc(3)
    metrics.outcomes.labels("b", "failed").inc()
    clock.advance(30)
    history.sample()
    clock.advance(60)
    metrics.outcomes.labels("a", "succeeded").inc(2)

    first, minutes = history.window(None)  # a read samples first
    assert len(minutes) == KEPT_MINUTES
    assert first == clock.now().replace(second=0, microsecond=0) - timedelta(minutes=59)
    assert minutes[-2:] == [{"succeeded": 3, "failed": 1}, {"succeeded": 2}]
    assert all(m == {} for m in minutes[:-2])
    assert history.window("b")[1][-2:] == [{"failed": 1}, {}]
    assert history.totals_by_queue() == {"a": {"succeeded": 5}, "b": {"failed": 1}}
    assert history.recorded_since == clock.now() - timedelta(seconds=90)


def test_an_hour_later_the_old_minutes_are_gone() -> None:
    history, metrics, clock = _history()
    metrics.outcomes.labels("a", "expired").inc(4)
    history.sample()
    clock.advance(minutes=KEPT_MINUTES - 1)
    assert sum(m.get("expired", 0) for m in history.window(None)[1]) == 4
    clock.advance(minutes=1)
    assert history.window(None)[1] == [{}] * KEPT_MINUTES
    assert history.totals_by_queue() == {}


def test_a_clock_set_back_adds_to_the_newest_minute() -> None:
    history, metrics, clock = _history()
    history.sample()
    clock.advance(minutes=-5)
    metrics.outcomes.labels("a", "succeeded").inc()
    history.sample()
    clock.advance(minutes=5)
    assert history.window("a")[1][-1] == {"succeeded": 1}


def test_without_metrics_nothing_is_kept() -> None:
    history = OutcomeHistory(None, FakeClock())
    assert history.window(None)[1] == [{}] * KEPT_MINUTES
    assert history.recorded_since is None

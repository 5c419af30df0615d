"""The chaos harness (``bench/chaos.py``), small: 300 jobs over three queues (HTTP
``at_least_once`` and ``at_most_once``, Kafka ``at_least_once``), three daemons,
three SIGKILLs, a broker restart and a PostgreSQL restart; nothing lost, no double
launch on the ``at_most_once`` queue, no limit overshoot as the downstreams see it,
and every job readable at the end (``GET /v1/jobs/{queue}/{id}`` answers 200 for
each, late responses with a text error on their history included: issue 46, where
such a job answered 422).

The harness starts a PostgreSQL and a Kafka broker of its own (it restarts them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos import ALO, AMO, KAFKA, Options, run_chaos

pytestmark = pytest.mark.slow


async def test_small_chaos_run(tmp_path: Path) -> None:
    report = await run_chaos(Options(jobs=300, kills=3, kill_every=2.0, drain_timeout=60,
                                     kafka_timeout=10, workdir=tmp_path))
    assert report.acknowledged == 300
    assert report.lost_jobs == 0, report
    assert report.lost_jobs_per_queue == {ALO: 0, AMO: 0, KAFKA: 0}, report
    assert report.terminal == 300, report
    assert report.double_launches_amo == 0, report
    assert report.overshoots == 0, report
    assert set(report.peak) == {ALO, AMO, KAFKA}, report
    assert report.statuses[KAFKA] == {"succeeded": 100}, report  # retryable failures only
    assert report.kills == 3
    assert report.pg_restarts == 1
    assert report.broker_restarts == 1
    assert report.drain_seconds < 60, report
    # the downstream's second answers, failing with a text error, reached ended tries:
    # recorded late on the histories, which every GET below had to read
    assert report.second_answers > 0, report
    assert sum(o.get("late_response", 0) for o in report.try_outcomes.values()) > 0, report
    assert report.unreadable_jobs == 0, report.unreadable
    assert report.clean, report

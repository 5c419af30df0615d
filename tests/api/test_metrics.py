"""/metrics through prometheus_client's parser: the families of docs/operations.md ("Metrics") exist
with HELP lines and move as jobs succeed, fail, retry, time out and expire."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hipq.testing import FakeClock
from tests.api.conftest import Api, Downstream, Live, LiveFactory, http_queue

FAMILIES = {"hipq_jobs_enqueued": "counter", "hipq_launches": "counter",
            "hipq_job_outcomes": "counter", "hipq_responses": "counter",
            "hipq_tick_duration_seconds": "histogram", "hipq_launch_delay_seconds": "histogram",
            "hipq_queue_jobs": "gauge", "hipq_queue_running_weight": "gauge",
            "hipq_queue_lag_seconds": "gauge"}


async def _scrape(api: Api) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = await api.call("GET", "/metrics", token=None)
    assert status == 200, text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, kind in FAMILIES.items():
        assert name in families, name
        assert families[name].type == kind, name
        assert families[name].documentation, name
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in families.values() for s in f.samples}


def _outcome(samples: dict[Any, float], outcome: str) -> float:
    return samples.get(("hipq_job_outcomes_total", (("outcome", outcome), ("queue", "m"))), 0.0)


async def _until(lv: Live, probe: Any, within: float = 15.0) -> dict[Any, float]:
    deadline = time.monotonic() + within
    while True:
        samples = await _scrape(lv.api)
        if probe(samples):
            return samples
        assert time.monotonic() < deadline, {k: v for k, v in samples.items()
                                              if k[0].startswith("hipq_job")}
        lv.daemon.wake()
        await asyncio.sleep(0.05)  # polling the API; there is no event to wait on


async def test_metrics_move_with_outcomes(live: LiveFactory, downstream: Downstream) -> None:
    clock = FakeClock()
    lv = await live(clock=clock)
    api = lv.api
    before = await _scrape(api)
    assert not any(k[0] == "hipq_job_outcomes_total" for k in before)
    status, body = await api.call("POST", "/v1/jobs", http_queue("m", downstream.url,
                                                                 attempts=2))
    assert status == 201, body

    async def callback(job_id: str, attempt: int, status: str) -> None:
        answer = await api.call("POST", f"/v1/jobs/m/{job_id}",
                                {"status": status, "attempt": attempt, "retryable": True})
        assert answer[0] == 202, answer

    await api.call("PUT", "/v1/jobs/m/ok", {})
    await api.call("PUT", "/v1/jobs/m/bad", {})
    await api.call("PUT", "/v1/jobs/m/slow", {"timeout_seconds": 30})
    await api.call("PUT", "/v1/jobs/m/old", {"expires_at": "2020-01-01T00:00:00Z"})
    await downstream.wait_for(3)
    await callback("ok", 1, "succeeded")
    await callback("bad", 1, "failed")
    samples = await _until(lv, lambda s: _outcome(s, "retried") == 1
                           and _outcome(s, "succeeded") == 1 and _outcome(s, "expired") == 1)
    assert samples[("hipq_jobs_enqueued_total", (("queue", "m"),))] == 4
    assert samples[("hipq_launches_total", (("queue", "m"),))] >= 3
    clock.advance(2)  # the retry delay, and the gauges' cache time
    samples = await _scrape(api)
    assert samples[("hipq_queue_jobs", (("queue", "m"), ("state", "running")))] >= 1
    await _until(lv, lambda s: s.get(("hipq_launches_total", (("queue", "m"),))) == 4)
    await downstream.wait_for(4)
    await callback("bad", 2, "failed")
    clock.advance(31)  # past the deadline of "slow"
    samples = await _until(lv, lambda s: _outcome(s, "failed") == 1
                           and _outcome(s, "timeout") == 1)
    assert samples[("hipq_responses_total", (("outcome", "applied"),))] >= 3
    assert samples[("hipq_tick_duration_seconds_count", ())] > 0
    assert samples[("hipq_launch_delay_seconds_count", (("queue", "m"),))] >= 4


async def test_gauges_are_cached(live: LiveFactory) -> None:
    clock = FakeClock()
    lv = await live(clock=clock)
    api = lv.api
    await api.call("POST", "/v1/jobs", {"id": "g"})
    first = await _scrape(api)
    assert first[("hipq_queue_jobs", (("queue", "g"), ("state", "queued")))] == 0
    await api.call("PUT", "/v1/jobs/g/a", {"run_after": (clock.now() + timedelta(hours=1))
                                           .isoformat()})
    cached = await _scrape(api)
    assert cached[("hipq_queue_jobs", (("queue", "g"), ("state", "queued")))] == 0
    clock.advance(2)
    fresh = await _scrape(api)
    assert fresh[("hipq_queue_jobs", (("queue", "g"), ("state", "queued")))] == 1

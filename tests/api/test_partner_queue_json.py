"""The partner's word on the queue JSON and in /metrics (docs/throttling.md): the pauses in
force (soonest end first), the concurrency in force, the held jobs of the last tick
and the throttled tries, as the owner stored them; a resume ends the pauses and its
answer shows none. The queues here have no target, so their owner never writes over
what a test stored (nothing is launched, nothing is counted); the rows are stored
before the queues are made, so even the snapshot their creation reads has them."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hipq.store import Store
from hipq.store.records import Backoff, QueueState
from hipq.testing import FakeClock
from tests.api.conftest import Api, Live, LiveFactory

REASON = "HTTP 429 from http://partner.test"
WEIRD = 'plugin "says"\\ no\nway'  # a throttler's own reason: escaped in /metrics


def _store(lv: Live) -> Store:
    assert lv.daemon.service is not None
    return lv.daemon.service.store


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def _queues(api: Api) -> None:
    bodies = ({"id": "tenants", "concurrency": 60, "adaptive": {"min": 2},
               "backoff": {"scope": "group", "field": "tenant"}},
              {"id": "whole", "concurrency": 5},
              {"id": "plain"})
    for body in bodies:
        status, answer = await api.call("POST", "/v1/jobs", body)
        assert status == 201, answer


async def _partner_said(lv: Live, now: datetime) -> None:
    store = _store(lv)
    since = now - timedelta(seconds=1)

    def pause(queue: str, group: str | None, seconds: float, reason: str = REASON) -> Backoff:
        return Backoff(queue=queue, group=group, until=now + timedelta(seconds=seconds),
                       reason=reason, streak=2, since=since)

    await store.backoff_replace(queue="tenants", backoffs=[
        pause("tenants", "us", 20), pause("tenants", "eu", 10, "budget spent"),
        pause("tenants", "gone", -5)])
    await store.backoff_replace(queue="whole", backoffs=[pause("whole", None, 30)])
    await store.queue_state_save([
        QueueState(queue="tenants", effective=10.7, held={"concurrency": 42, "window": 3,
                                                          WEIRD: 1},
                   held_at=now, throttled_total=7),
        QueueState(queue="whole", held={"backoff": 4, "partner": 6}, held_at=now,
                   throttled_total=1, learned_rate=40.0, learned_since=now)])


async def _queue(api: Api, queue: str) -> dict[str, Any]:
    status, body = await api.call("GET", f"/v1/jobs/{queue}")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


async def test_queue_json_shows_the_partner_word(live: LiveFactory) -> None:
    clock = FakeClock()
    lv = await live(clock=clock)
    api, now = lv.api, clock.now()
    await _partner_said(lv, now)
    await _queues(api)

    tenants = await _queue(api, "tenants")
    assert [(b["group"], b["reason"]) for b in tenants["backoff"]] == [
        ("eu", "budget spent"), ("us", REASON)]  # in force only, soonest end first
    assert [_when(b["until"]) for b in tenants["backoff"]] == [
        now + timedelta(seconds=10), now + timedelta(seconds=20)]
    assert tenants["backoff"][0]["until"].endswith("Z")
    assert tenants["effective_concurrency"] == 10  # floor(10.7), within [2, 60]
    assert tenants["held"] == {"concurrency": 42, "window": 3, WEIRD: 1}
    assert tenants["throttled_total"] == 7

    whole = await _queue(api, "whole")
    assert whole["backoff"] == [{"group": None, "until": whole["backoff"][0]["until"],
                                 "reason": REASON}]
    assert whole["effective_concurrency"] == 5  # not adaptive: the configured one
    assert whole["held"] == {"backoff": 4, "partner": 6}
    assert whole["learned_rate"] == 28.0  # refused at 40 a second, just now: 0.7 x 40
    assert tenants["learned_rate"] is None  # nothing learned: no limit of its own
    plain = await _queue(api, "plain")
    assert (plain["backoff"], plain["effective_concurrency"], plain["held"],
            plain["throttled_total"], plain["learned_rate"]) == ([], None, {}, 0, None)

    status, listed = await api.call("GET", "/v1/jobs")
    assert status == 200, listed
    by_id = {q["id"]: q for q in listed["queues"]}
    for queue in (tenants, whole, plain):
        shown = by_id[queue["id"]]
        assert {k: shown[k] for k in ("backoff", "effective_concurrency", "held",
                                      "throttled_total", "learned_rate")} == {
            k: queue[k] for k in ("backoff", "effective_concurrency", "held",
                                  "throttled_total", "learned_rate")}

    clock.advance(15)  # eu's pause has passed: filtered at answer time
    assert [b["group"] for b in (await _queue(api, "tenants"))["backoff"]] == ["us"]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


async def test_metrics_show_the_partner_word(live: LiveFactory) -> None:
    clock = FakeClock()
    lv = await live(clock=clock)
    await _partner_said(lv, clock.now())
    await _queues(lv.api)
    status, text = await lv.api.call("GET", "/metrics", token=None)
    assert status == 200, text
    samples = _samples(text)

    def value(name: str, **labels: str) -> float | None:
        return samples.get((name, tuple(sorted(labels.items()))))

    assert value("hipq_backoff_active", queue="tenants") == 2
    assert value("hipq_backoff_active", queue="whole") == 1
    assert value("hipq_backoff_active", queue="plain") == 0
    assert value("hipq_throttled_total", queue="tenants") == 7
    assert value("hipq_throttled_total", queue="plain") == 0
    assert value("hipq_queue_effective_concurrency", queue="tenants") == 10
    assert value("hipq_queue_effective_concurrency", queue="whole") == 5
    assert value("hipq_queue_effective_concurrency", queue="plain") is None  # no concurrency
    assert value("hipq_queue_held_jobs", queue="tenants", reason="concurrency") == 42
    assert value("hipq_queue_held_jobs", queue="tenants", reason="window") == 3
    assert value("hipq_queue_held_jobs", queue="tenants", reason="quota") == 0
    assert value("hipq_queue_held_jobs", queue="whole", reason="backoff") == 4
    assert value("hipq_queue_held_jobs", queue="whole", reason="partner") == 6
    assert value("hipq_queue_learned_rate", queue="whole") == 28.0
    assert value("hipq_queue_learned_rate", queue="plain") is None
    assert value("hipq_queue_held_jobs", queue="tenants", reason=WEIRD) == 1
    assert 'reason="plugin \\"says\\"\\\\ no\\nway"' in text  # escaped as Prometheus says
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families["hipq_throttled"] == "counter"
    assert families["hipq_backoff_active"] == "gauge"

    clock.advance(12)  # past eu's pause and the gauges' cache time
    status, text = await lv.api.call("GET", "/metrics", token=None)
    assert _samples(text)[("hipq_backoff_active", (("queue", "tenants"),))] == 1


async def test_resume_ends_the_partner_pause(live: LiveFactory) -> None:
    clock = FakeClock()
    lv = await live(clock=clock, api={"stats_max_age_seconds": 2})  # a cached snapshot
    api = lv.api
    await _partner_said(lv, clock.now())  # before the queues: in the first snapshot
    await _queues(api)
    assert len((await _queue(api, "tenants"))["backoff"]) == 2  # the snapshot has them
    assert len((await _queue(api, "whole"))["backoff"]) == 1

    status, answer = await api.call("POST", "/v1/jobs/whole/resume")
    assert status == 200, answer
    assert answer["backoff"] == []
    assert answer["throttled_total"] == 1  # what was learned stays
    assert (await _queue(api, "whole"))["backoff"] == []  # the snapshot forgot them
    assert len((await _queue(api, "tenants"))["backoff"]) == 2  # other queues keep theirs
    assert await _store(lv).backoff_list(queues=["whole"]) == []

"""``GET /v1/partners[/{id}]`` and the partner gauges of ``/metrics`` (docs/http-api.md,
"Partners"; docs/operations.md): live daemons on real sockets, a real downstream
that accepts tries and keeps them running, SQLite and PostgreSQL. What the owner
wrote in the database is what every daemon answers, and a restart keeps the hour."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import READER, Api, Downstream, Live, LiveFactory, http_queue, poll_pauses

PARTNERS = [
    {"id": "llm", "concurrency": 5,
     "limits": [{"requests": 100, "per_seconds": 60}, {"cost": 1000, "per_seconds": 60}],
     "cost": {"estimate": "tokens"}},
    {"id": "maps", "limits": [{"requests": 10, "per_seconds": 1}]},
]


async def _start(live: LiveFactory) -> Live:
    return await live(partners=PARTNERS)


async def _partner(api: Api, partner: str) -> dict[str, Any]:
    status, body = await api.call("GET", f"/v1/partners/{partner}", token=READER)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


async def _until(api: Api, partner: str, check: Callable[[dict[str, Any]], bool],
                 within: float = 20.0) -> dict[str, Any]:
    deadline, pauses = time.monotonic() + within, poll_pauses()
    while True:
        body = await _partner(api, partner)
        if check(body):
            return body
        assert time.monotonic() < deadline, body
        await asyncio.sleep(next(pauses))  # polling the API; the owner writes once a second


async def _five_in_flight(lv: Live, downstream: Downstream) -> dict[str, Any]:
    api = lv.api
    body = http_queue("summaries", downstream.url, partner="llm", concurrency=50,
                      target={"timeout_seconds": 300})
    status, answer = await api.call("POST", "/v1/jobs", body)
    assert status == 201, answer
    jobs = [{"id": f"j{i}", "data": {"tokens": 30}} for i in range(8)]
    status, answer = await api.call("POST", "/v1/jobs/summaries/batch", {"jobs": jobs})
    assert status == 200, answer
    await downstream.wait_for(5)
    return await _until(api, "llm", lambda b: b["in_flight"] == 5)


async def test_every_declared_partner_is_listed_and_an_unknown_one_is_404(
        live: LiveFactory) -> None:
    api = (await _start(live)).api
    status, body = await api.call("GET", "/v1/partners", token=READER)
    assert status == 200, body
    assert [p["id"] for p in body["partners"]] == ["llm", "maps"]
    maps = body["partners"][1]  # nobody owns it yet: its limits, nothing used
    assert (maps["owner"], maps["updated_at"], maps["in_flight"], maps["learned_rate"]) == (
        None, None, 0, None)
    assert maps["buckets"] == [{"name": "requests_per_1s", "unit": "requests", "limit": 10.0,
                                "per_seconds": 1.0, "used": 0.0, "remaining": 10.0,
                                "room_at": None, "source": "configured"}]
    detail = await _partner(api, "maps")
    assert len(detail["minutes"]) == 60
    assert {(m["accepted"], m["refused"]) for m in detail["minutes"]} == {(0, 0)}
    assert (detail["keys"], detail["key_count"]) == ([], 0)

    status, body = await api.call("GET", "/v1/partners/nope", token=READER)
    assert status == 404, body
    assert body["error"] == {"code": "partner_not_found", "details": None,
                             "message": "no partner 'nope' is declared under partners"}
    status, body = await api.call("GET", f"/v1/partners/{'x' * 300}", token=READER)
    assert (status, body["error"]["code"]) == (422, "invalid_id")
    assert (await api.call("GET", "/v1/partners", token=None))[0] == 401


async def test_the_owner_shows_its_buckets_and_every_daemon_the_same(
        live: LiveFactory, downstream: Downstream, backend: str) -> None:
    first = await _start(live)
    llm = await _five_in_flight(first, downstream)
    assert (llm["concurrency"], llm["in_flight"], llm["accepted_total"]) == (5, 5, 5)
    assert llm["owner"] == first.daemon.owner
    assert [(b["name"], b["used"], b["remaining"]) for b in llm["buckets"]] == [
        ("requests_per_60s", 5.0, 95.0), ("cost_per_60s", 150.0, 850.0)]
    assert sum(m["accepted"] for m in llm["minutes"]) == 5
    assert max(m["in_flight_max"] for m in llm["minutes"]) == 5
    status, listed = await first.api.call("GET", "/v1/partners")
    assert status == 200, listed
    assert [(b["name"], b["used"]) for b in listed["partners"][0]["buckets"]] == [
        ("requests_per_60s", 5.0), ("cost_per_60s", 150.0)]

    if backend == "postgresql":  # a second daemon answers what the owner wrote
        second = await _start(live)
        for _ in range(20):
            a, b = await asyncio.gather(_partner(first.api, "llm"),
                                        _partner(second.api, "llm"))
            if a == b:
                break
        assert a == b  # the owner wrote between the two reads 20 times: impossible

    # a restart keeps the hour: the minutes are in the database
    for lv in [first] if backend != "postgresql" else [first, second]:
        lv.stop.set()
        await asyncio.wait_for(lv.task, 30)
    after = await _start(live)
    kept = await _partner(after.api, "llm")
    assert sum(m["accepted"] for m in kept["minutes"]) >= 5


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_the_partner_gauges(live: LiveFactory, downstream: Downstream) -> None:
    lv = await _start(live)
    await _five_in_flight(lv, downstream)
    deadline = time.monotonic() + 20
    while True:  # the gauges are cached for 2 s
        status, text = await lv.api.call("GET", "/metrics")
        assert status == 200
        samples = _samples(text)
        if samples.get(("hipq_partner_in_flight", (("partner", "llm"),))) == 5:
            break
        assert time.monotonic() < deadline, text
        await asyncio.sleep(0.2)  # polling the API
    remaining = {labels: v for (name, labels), v in samples.items()
                 if name == "hipq_partner_budget_remaining"}
    assert remaining == {
        (("bucket", "requests_per_60s"), ("partner", "llm")): 95.0,
        (("bucket", "cost_per_60s"), ("partner", "llm")): 850.0,
        (("bucket", "requests_per_1s"), ("partner", "maps")): 10.0}
    assert samples[("hipq_partner_in_flight", (("partner", "maps"),))] == 0
    assert not any(name == "hipq_partner_learned_rate" for name, _ in samples)  # nothing learned

"""The response edge cases (docs/http-api.md) over HTTP, on SQLite and PostgreSQL. Time is a
FakeClock: timeouts, retries and the unknown-key buffer move only when told to."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hipq.responses.signing import Signer
from hipq.testing import FakeClock
from tests.api.conftest import SIGNING_KEY, Api, Downstream, Live, LiveFactory, http_queue


async def _start(live: LiveFactory, downstream: Downstream, **queue: Any) -> tuple[Live, Api,
                                                                                   FakeClock]:
    clock = FakeClock()
    lv = await live(clock=clock, responses={"buffer_seconds": 60})
    status, body = await lv.api.call("POST", "/v1/jobs", http_queue("e", downstream.url,
                                                                    **queue))
    assert status == 201, body
    return lv, lv.api, clock


async def _until(probe: Callable[[], Any], lv: Live, within: float = 15.0) -> Any:
    """Wake the loop and poll ``probe`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + within
    while not (value := await probe()):
        assert time.monotonic() < deadline, "condition not reached"
        lv.daemon.wake()
        await asyncio.sleep(0.02)  # polling the API; there is no event to wait on
    return value


async def _counts(api: Api) -> dict[str, int]:
    status, body = await api.call("GET", "/v1/stats")
    assert status == 200
    return body["responses"]  # type: ignore[no-any-return]


async def test_response_before_the_launch_is_acknowledged(live: LiveFactory,
                                                          downstream: Downstream) -> None:
    """A fast downstream answers at its callback URL before it answers the launch."""
    async def reply(body: dict[str, Any]) -> tuple[int, Any]:
        async with api.session.post(body["callback_url"], json={"result": "fast"}) as answer:
            assert answer.status == 202
        return 202, {}

    downstream.reply = reply
    _, api, _ = await _start(live, downstream)
    await api.call("PUT", "/v1/jobs/e/fast", {})
    job = await api.wait_job("e", "fast", "succeeded")
    assert job["result"] == "fast"
    assert [h["outcome"] for h in job["history"]] == ["succeeded"]


async def test_response_before_the_job_runs_is_kept(live: LiveFactory,
                                                    downstream: Downstream) -> None:
    """A fixed key (request template) can be answered while the job is still queued;
    the response waits in the inbox and is applied once the job runs."""
    lv, api, clock = await _start(live, downstream, correlation={
        "request": "order-{data.order}", "response": "order-{body.orderId}"})
    run_after = (clock.now() + timedelta(seconds=60)).isoformat()
    await api.call("PUT", "/v1/jobs/e/o1", {"data": {"order": 7}, "run_after": run_after})
    status, ack = await api.call("POST", "/v1/inbox/e", {"orderId": 7, "status": "succeeded",
                                                         "result": {"paid": True}})
    assert (status, ack["correlation_key"]) == (202, "order-7")
    assert (await api.job("e", "o1"))["status"] == "queued"
    clock.advance(61)
    job = await _until(lambda: _status(api, "o1", "succeeded"), lv)
    assert job["result"] == {"paid": True}


async def _status(api: Api, job_id: str, *statuses: str) -> dict[str, Any] | None:
    job = await api.job("e", job_id)
    return job if job["status"] in statuses else None


async def test_duplicate_responses_are_applied_once(live: LiveFactory,
                                                    downstream: Downstream) -> None:
    _, api, _ = await _start(live, downstream)
    await api.call("PUT", "/v1/jobs/e/dup", {})
    [launch] = await downstream.wait_for(1)
    answers = await asyncio.gather(*[
        api.call("POST", launch["callback_url"], {"result": {"n": 1}}, token=None)
        for _ in range(5)])
    assert {status for status, _ in answers} == {202}
    job = await api.wait_job("e", "dup", "succeeded")
    assert job["result"] == {"n": 1}
    assert [h["outcome"] for h in job["history"]] == ["succeeded"]
    counts = await _counts(api)
    assert counts["applied"] == 1
    assert counts["pending"] == 0


async def test_stale_attempt_gets_409_and_changes_nothing(live: LiveFactory,
                                                          downstream: Downstream) -> None:
    lv, api, clock = await _start(live, downstream)
    await api.call("PUT", "/v1/jobs/e/st", {})
    [first] = await downstream.wait_for(1)
    status, _ = await api.call("POST", first["callback_url"],
                               {"status": "failed", "error": "try again"}, token=None)
    assert status == 202
    await _until(lambda: _status(api, "st", "queued"), lv)
    clock.advance(1)  # past the retry delay
    second = (await _until(lambda: _launches(downstream, 2), lv))[1]
    assert second["attempt"] == 2
    status, err = await api.call("POST", first["callback_url"], {"result": "old"}, token=None)
    assert status == 409
    assert err["error"]["code"] == "stale_response"
    status, err = await api.call("POST", "/v1/jobs/e/st", {"attempt": 1, "result": "old"})
    assert status == 409
    assert err["error"]["code"] == "stale_response"
    job = await api.wait_job("e", "st", "running")
    assert job["attempt"] == 2
    status, _ = await api.call("POST", "/v1/jobs/e/st", {"attempt": 2, "result": "new"})
    assert status == 202
    job = await api.wait_job("e", "st", "succeeded")
    assert job["result"] == "new"
    assert [h["outcome"] for h in job["history"]] == ["response_failed", "succeeded"]


async def _launches(downstream: Downstream, count: int) -> list[dict[str, Any]] | None:
    return downstream.received if len(downstream.received) >= count else None


async def test_late_response_after_timeout_is_recorded_not_applied(
        live: LiveFactory, downstream: Downstream) -> None:
    lv, api, clock = await _start(live, downstream, attempts=1, timeout_seconds=30)
    await api.call("PUT", "/v1/jobs/e/slow", {})
    [launch] = await downstream.wait_for(1)
    await api.wait_job("e", "slow", "running")
    clock.advance(31)
    job = await _until(lambda: _status(api, "slow", "failed"), lv)
    assert job["history"][0]["outcome"] == "timeout"
    status, _ = await api.call("POST", launch["callback_url"], {"result": "too late"}, token=None)
    assert status == 202
    clock.advance(2)
    job = await _until(lambda: _history(api, "slow", 2), lv)
    assert job["status"] == "failed"
    assert job["result"] is None
    assert [h["outcome"] for h in job["history"]] == ["timeout", "late_response"]
    # the history row and the inbox mark are two store calls of one tick: wait for both
    counts = await _until(lambda: _late(api), lv)
    assert counts["late"] == 1


async def _late(api: Api) -> dict[str, int] | None:
    counts = await _counts(api)
    return counts if counts["late"] >= 1 else None


async def _history(api: Api, job_id: str, length: int) -> dict[str, Any] | None:
    job = await api.job("e", job_id)
    return job if len(job["history"]) >= length else None


async def test_unknown_key_is_buffered_then_unmatched(live: LiveFactory,
                                                      downstream: Downstream) -> None:
    lv, api, clock = await _start(live, downstream)
    url = Signer(SIGNING_KEY).callback_url(api.base, "nobody-knows.1", 1, "no-such-token")
    status, ack = await api.call("POST", url, {"result": 1}, token=None)
    assert status == 202
    assert ack["accepted"] is True
    clock.advance(5)
    lv.daemon.wake()
    assert (await _counts(api))["pending"] == 1  # buffered: its job may still come
    clock.advance(60)
    counts = await _until(lambda: _unmatched(api), lv)
    assert counts["pending"] == 0
    # the counter moves once the tick that classified the response has ended
    await _until(lambda: _metric(api, 'hipq_responses_total{outcome="unmatched"} 1.0'), lv)


async def _metric(api: Api, line: str) -> bool:
    status, text = await api.call("GET", "/metrics", token=None)
    assert status == 200
    return line in text


async def _unmatched(api: Api) -> dict[str, int] | None:
    counts = await _counts(api)
    return counts if counts["unmatched"] == 1 else None

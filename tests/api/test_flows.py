"""The main flows over real sockets, on SQLite and PostgreSQL: an in-process daemon
serving the API on 127.0.0.1 and launching into a real downstream server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.api.conftest import Downstream, LiveFactory, archived_ids, expire_many, http_queue

LAUNCH_KEYS = {"id", "queue", "data", "attempt", "max_attempts", "correlation_key",
               "callback_url"}


async def test_callback_mode_end_to_end(live: LiveFactory, downstream: Downstream) -> None:
    api = (await live()).api
    target = {"headers": {"X-Team": "ops"}, "auth": {"type": "bearer", "token": "down-secret"}}
    status, queue = await api.call("POST", "/v1/jobs", http_queue("mail", downstream.url,
                                                                  target=dict(target)))
    assert status == 201, queue
    status, queue = await api.call("POST", "/v1/jobs", http_queue(
        "mail", downstream.url, concurrency=3, target=dict(target)))
    assert (status, queue["config"]["concurrency"]) == (200, 3)  # updated
    status, job = await api.call("PUT", "/v1/jobs/mail/m-1", {"data": {"to": "ann"}})
    assert (status, job["status"]) == (201, "queued")

    [launch] = await downstream.wait_for(1)
    assert set(launch) == LAUNCH_KEYS
    assert launch["id"] == "m-1"
    assert launch["queue"] == "mail"
    assert launch["data"] == {"to": "ann"}
    assert launch["attempt"] == 1
    assert launch["max_attempts"] == 3
    headers = downstream.headers[0]
    assert headers["Hipq-Correlation-Key"] == launch["correlation_key"]
    assert headers["X-Team"] == "ops"
    assert headers["Authorization"] == "Bearer down-secret"
    assert launch["callback_url"].startswith(api.base + "/v1/responses/")

    status, ack = await api.call("POST", launch["callback_url"],
                                 {"status": "succeeded", "result": {"sent": True}}, token=None)
    assert status == 202
    assert ack["accepted"] is True
    job = await api.wait_job("mail", "m-1", "succeeded")
    assert job["result"] == {"sent": True}
    assert [h["outcome"] for h in job["history"]] == ["succeeded"]


async def test_sync_mode_success_keeps_the_body(live: LiveFactory,
                                                downstream: Downstream) -> None:
    async def reply(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"echo": body["data"]}

    downstream.reply = reply
    api = (await live()).api
    await api.call("POST", "/v1/jobs", http_queue("s", downstream.url, target={"mode": "sync"}))
    await api.call("PUT", "/v1/jobs/s/one", {"data": {"n": 1}})
    job = await api.wait_job("s", "one", "succeeded")
    assert job["result"] == {"echo": {"n": 1}}


async def test_failures_are_retried_per_the_queue_strategy(live: LiveFactory,
                                                          downstream: Downstream) -> None:
    async def reply(body: dict[str, Any]) -> tuple[int, Any]:
        if body["id"] == "bad-request":
            return 400, {"why": "no"}
        return (503, "busy") if body["attempt"] < 3 else (200, {"done": body["attempt"]})

    downstream.reply = reply
    api = (await live()).api
    await api.call("POST", "/v1/jobs", http_queue("r", downstream.url, attempts=3,
                                                  target={"mode": "sync"}))
    await api.call("PUT", "/v1/jobs/r/flaky", {})
    await api.call("PUT", "/v1/jobs/r/bad-request", {})
    job = await api.wait_job("r", "flaky", "succeeded")
    assert job["result"] == {"done": 3}
    outcomes = [(h["outcome"], (h["error"] or {}).get("data", {}).get("status"))
                for h in job["history"]]
    assert outcomes == [("http_status", 503), ("http_status", 503), ("succeeded", None)]
    bad = await api.wait_job("r", "bad-request", "failed")
    assert len(bad["history"]) == 1
    assert bad["history"][0]["outcome"] == "http_status"


async def test_connection_errors_are_retryable_transport_failures(live: LiveFactory) -> None:
    api = (await live()).api
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    await api.call("POST", "/v1/jobs", http_queue("gone", dead, attempts=2))
    await api.call("PUT", "/v1/jobs/gone/x", {})
    job = await api.wait_job("gone", "x", "failed")
    assert [h["outcome"] for h in job["history"]] == ["transport", "transport"]


async def test_replay_makes_a_new_job(live: LiveFactory, downstream: Downstream) -> None:
    async def reply(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"ok": body["id"]}

    downstream.reply = reply
    api = (await live()).api
    await api.call("POST", "/v1/jobs", http_queue("p", downstream.url, target={"mode": "sync"}))
    await api.call("PUT", "/v1/jobs/p/orig", {"data": {"k": "v"}})
    await api.wait_job("p", "orig", "succeeded")
    status, copy = await api.call("POST", "/v1/jobs/p/orig/replay")
    assert status == 201
    assert copy["replay_of"] == "orig"
    assert copy["data"] == {"k": "v"}
    done = await api.wait_job("p", copy["id"], "succeeded")
    assert done["result"] == {"ok": copy["id"]}


async def test_cancel_queued_and_running(live: LiveFactory, downstream: Downstream) -> None:
    api = (await live()).api
    await api.call("POST", "/v1/jobs", http_queue("c", downstream.url))
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    await api.call("PUT", "/v1/jobs/c/future", {"run_after": later})
    status, job = await api.call("DELETE", "/v1/jobs/c/future")
    assert (status, job["status"]) == (200, "cancelled")
    await api.call("PUT", "/v1/jobs/c/now", {})
    await downstream.wait_for(1)
    await api.wait_job("c", "now", "running")
    status, job = await api.call("DELETE", "/v1/jobs/c/now")
    assert status == 202
    assert (await api.wait_job("c", "now", "cancelled"))["history"][-1]["outcome"] == "cancelled"
    status, err = await api.call("DELETE", "/v1/jobs/c/now")
    assert status == 409
    assert err["error"]["code"] == "conflict"


async def test_enqueue_is_idempotent(live: LiveFactory) -> None:
    api = (await live()).api
    await api.call("POST", "/v1/jobs", {"id": "idem"})
    assert (await api.call("PUT", "/v1/jobs/idem/a", {"data": {"x": 1}}))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/idem/a", {"data": {"x": 1}}))[0] == 200
    status, err = await api.call("PUT", "/v1/jobs/idem/a", {"data": {"x": 2}})
    assert status == 409
    assert err["error"]["code"] == "conflict"
    status, made = await api.call("PUT", "/v1/jobs/idem/random_id", {})
    assert status == 201
    assert len(made["id"]) == 36


async def test_batch_reports_each_item(live: LiveFactory) -> None:
    api = (await live()).api
    await api.call("POST", "/v1/jobs", {"id": "b"})
    await api.call("PUT", "/v1/jobs/b/dup", {"data": {"v": 1}})
    jobs = [{"id": "n1"}, {"id": "dup", "data": {"v": 1}}, {"id": "dup2"},
            {"id": "bad id!"}, {"id": "clash", "data": "not an object"}]
    await api.call("PUT", "/v1/jobs/b/dup2", {"data": {"v": 9}})
    status, body = await api.call("POST", "/v1/jobs/b/batch", {"jobs": jobs})
    assert status == 200, body
    assert [(r["id"], r["status"]) for r in body["jobs"]] == [
        ("n1", "created"), ("dup", "exists"), ("dup2", "conflict"), ("bad id!", "invalid"),
        ("clash", "invalid")]
    many = [{"id": f"m{i}"} for i in range(10_000)]  # the most one call takes
    status, body = await api.call("POST", "/v1/jobs/b/batch", {"jobs": many})
    assert status == 200
    assert {r["status"] for r in body["jobs"]} == {"created"}
    too_many = {"jobs": [{"id": f"t{i}"} for i in range(10_001)]}  # the limit is 10,000
    status, body = await api.call("POST", "/v1/jobs/b/batch", too_many)
    assert status == 422
    assert body["error"]["code"] == "invalid_request"


async def test_archived_jobs_paginate_without_gaps_or_repeats(live: LiveFactory) -> None:
    api = (await live()).api
    await api.call("POST", "/v1/jobs", {"id": "arch"})
    await api.call("POST", "/v1/jobs", {"id": "other"})
    await expire_many(api, "arch", 1000)
    await api.call("PUT", "/v1/jobs/other/o1", {"expires_at": "2020-01-01T00:00:00Z"})
    await api.wait_job("other", "o1", "expired")
    seen = await archived_ids(api, "name=arch&status=expired&limit=37")
    assert len(seen) == 1000
    assert set(seen) == {f"j{i:04d}" for i in range(1000)}
    assert len(await archived_ids(api, "limit=1000")) == 1001
    assert await archived_ids(api, "name=arch&status=succeeded") == []
    status, err = await api.call("GET", "/v1/archived-jobs?cursor=nonsense")
    assert status == 400
    assert err["error"]["code"] == "invalid_cursor"


async def test_queue_routes_and_stats(live: LiveFactory) -> None:
    api = (await live()).api
    await api.call("POST", "/v1/jobs", {"id": "qs", "concurrency": 4})
    await api.call("PUT", "/v1/jobs/qs/a", {})
    status, body = await api.call("GET", "/v1/jobs")
    assert status == 200
    assert [q["id"] for q in body["queues"]] == ["qs"]
    assert body["queues"][0]["stats"]["queued"] == 1
    status, body = await api.call("POST", "/v1/jobs/qs/pause")
    assert status == 200
    assert body["paused"] is True
    status, body = await api.call("POST", "/v1/jobs/qs/resume")
    assert status == 200
    assert body["paused"] is False
    status, body = await api.call("GET", "/v1/jobs/qs")
    assert status == 200
    assert body["config"]["concurrency"] == 4
    status, body = await api.call("GET", "/v1/stats")
    assert status == 200
    assert body["queues"][0]["queue"] == "qs"
    status, text = await api.call("GET", "/metrics", token=None)
    assert status == 200
    assert 'hipq_queue_jobs{queue="qs",state="queued"} 1.0' in text
    status, text = await api.call("GET", "/", token=None)
    assert status == 200
    assert "<html" in text

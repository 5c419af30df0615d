"""GET /v1/queued-jobs: a queue's live jobs, paged by cursor, on both stores."""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.api.conftest import READER, Api, Downstream, LiveFactory, http_queue


def _old_cursor(wire: list[Any]) -> str:
    """A cursor in the format given out before the readable one (base64 JSON)."""
    return base64.urlsafe_b64encode(json.dumps(wire).encode()).decode().rstrip("=")


async def _pages(api: Api, query: str) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    while True:
        status, page = await api.call(
            "GET", f"/v1/queued-jobs?{query}" + (f"&cursor={cursor}" if cursor else ""),
            token=READER)
        assert status == 200, page
        pages.append(page["jobs"])
        cursor = page["next_cursor"]
        if cursor is None:
            return pages


async def test_queued_in_queue_order_paged(live: LiveFactory) -> None:
    hipq = await live()
    api = hipq.api
    status, body = await api.call("POST", "/v1/jobs", {"id": "q", "ordering":
                                                       "priority_then_time"})
    assert status == 201, body
    jobs = [{"id": f"j{i:02d}", "priority": i % 3} for i in range(7)]
    status, body = await api.call("POST", "/v1/jobs/q/batch", {"jobs": jobs})
    assert status == 200, body
    pages = await _pages(api, "name=q&state=queued&limit=3")
    assert [len(p) for p in pages] == [3, 3, 1]
    listed = [(j["priority"], j["id"]) for p in pages for j in p]
    assert listed == sorted(listed)
    assert all("history" not in j and j["status"] == "queued" for p in pages for j in p)
    status, page = await api.call("GET", "/v1/queued-jobs?name=q&state=running")
    assert (status, page) == (200, {"jobs": [], "next_cursor": None})


async def test_running_by_launch_time(live: LiveFactory, downstream: Downstream) -> None:
    hipq = await live()
    api = hipq.api
    status, body = await api.call("POST", "/v1/jobs", http_queue(
        "r", downstream.url, target={"timeout_seconds": 60}))
    assert status == 201, body
    for i in range(4):
        status, body = await api.call("PUT", f"/v1/jobs/r/job{i}", {"data": {"n": i}})
        assert status == 201, body
    await downstream.wait_for(4)
    for i in range(4):
        await api.wait_job("r", f"job{i}", "running")
    pages = await _pages(api, "name=r&state=running&limit=2")
    running = [j for p in pages for j in p]
    assert sorted(j["id"] for j in running) == [f"job{i}" for i in range(4)]
    assert [j["launched_at"] for j in running] == sorted(j["launched_at"] for j in running)


async def test_bad_requests_are_4xx(live: LiveFactory) -> None:
    api = (await live()).api
    await api.call("POST", "/v1/jobs", {"id": "q"})
    for query, code in [("", 422), ("name=q&state=done", 422), ("name=q&limit=0", 422),
                        ("name=q&cursor=nonsense", 400), ("name=nope", 404),
                        ("name=q&cursor=WyJydW5uaW5nIiwxXQ", 400),  # old format
                        (f"name=q&cursor={_old_cursor(['queued', {'t': '2020'}, 5, 'a'])}",
                         400),
                        ("name=q&cursor=5~x~a", 400), ("name=q&cursor=5~1", 400),
                        ("name=q&cursor=5~1~a~b", 400), ("name=q&cursor=5~1~a/b", 400),
                        ("name=q&cursor=5~12345678901~a", 400),  # over 10 digits
                        ("name=q&cursor=" + "1" * 19 + "~1~a", 400),
                        ("name=q&cursor=5~1~a%00", 422),
                        # <µs>~<priority>~<id>: any such cursor is a position (the
                        # priority held to 32 bits), in either state and order
                        ("name=q&cursor=5~9999999999~a", 200),
                        ("name=q&state=running&cursor=999999999999999999~-9999999999~a", 200),
                        ("name=q&cursor=0~0~0", 200)]:
        status, body = await api.call("GET", f"/v1/queued-jobs?{query}")
        assert status == code, (query, body)
        assert "error" in body if code != 200 else body["next_cursor"] is None
    status, _ = await api.call("GET", "/v1/queued-jobs?name=q&state=queued&limit=1")
    assert status == 200
    status, body = await api.call("GET", "/v1/queued-jobs?name=q", token=None)
    assert status == 401

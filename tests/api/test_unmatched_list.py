"""GET /v1/responses?outcome=unmatched over real sockets, on SQLite and PostgreSQL:
responses whose key matched no job are listed once their buffer time passed,
newest first, paged by cursor without gaps or repeats, bounded in items and bytes
(a large result is cut), readable by a reader and by nobody without a token; bad
query values are 422 and bad cursors 400, never a 500. Time is a FakeClock."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from hipq.api import paging, responses_page
from hipq.responses.signing import Signer
from hipq.testing import FakeClock
from tests.api.conftest import READER, SIGNING_KEY, Api, Live, LiveFactory

BUFFER = 60


async def _start(live: LiveFactory) -> tuple[Live, FakeClock]:
    clock = FakeClock()
    return await live(clock=clock, responses={"buffer_seconds": BUFFER}), clock


async def _ghost(api: Api, key: str, body: dict[str, Any]) -> None:
    """A signed callback for a key no job ever had (accepted: it may still come)."""
    url = Signer(SIGNING_KEY).callback_url(api.base, key, 1, "no-such-token")
    status, ack = await api.call("POST", url, body, token=None)
    assert status == 202, ack


async def _until(probe: Callable[[], Any], lv: Live, within: float = 15.0) -> Any:
    deadline = time.monotonic() + within
    while not (value := await probe()):
        assert time.monotonic() < deadline, "condition not reached"
        lv.daemon.wake()
        await asyncio.sleep(0.02)  # polling the API; there is no event to wait on
    return value


async def _unmatched_count(api: Api, count: int) -> bool:
    status, body = await api.call("GET", "/v1/stats")
    assert status == 200, body
    return bool(body["responses"]["unmatched"] == count)


async def _make_unmatched(lv: Live, clock: FakeClock, bodies: dict[str, dict[str, Any]], *,
                          total: int | None = None) -> None:
    """Post a response per key, then let the buffer time pass until ``total`` (default:
    these) are unmatched."""
    for key, body in bodies.items():
        await _ghost(lv.api, key, body)
    clock.advance(BUFFER + 5)
    await _until(lambda: _unmatched_count(lv.api, total or len(bodies)), lv)


async def _pages(api: Api, query: str) -> tuple[list[dict[str, Any]], list[int]]:
    """Every item ``GET /v1/responses?<query>`` pages through, and each page's size
    in bytes."""
    items: list[dict[str, Any]] = []
    sizes: list[int] = []
    cursor: str | None = None
    for _ in range(1000):
        path = f"/v1/responses?{query}" + (f"&cursor={cursor}" if cursor else "")
        async with api.session.get(api.base + path,
                                   headers={"Authorization": f"Bearer {api.token}"}) as answer:
            raw = await answer.read()
            assert answer.status == 200, raw
        page = json.loads(raw)
        sizes.append(len(raw))
        items += page["responses"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items, sizes
    raise AssertionError("pagination never ended")


async def test_unmatched_responses_are_listed_newest_first(live: LiveFactory) -> None:
    lv, clock = await _start(live)
    api = lv.api
    assert await api.call("GET", "/v1/responses?outcome=unmatched") == (
        200, {"responses": [], "next_cursor": None})
    await _ghost(api, "early.1", {"status": "failed", "error": {"why": "no order"}})
    clock.advance(5)
    await _make_unmatched(lv, clock, {f"ghost.{i}": {"result": {"n": i}} for i in range(5)},
                          total=6)

    status, page = await api.call("GET", "/v1/responses?outcome=unmatched&limit=100",
                                  token=READER)
    assert status == 200, page
    assert page["next_cursor"] is None
    keys = [r["correlation_key"] for r in page["responses"]]
    assert keys == ["ghost.4", "ghost.3", "ghost.2", "ghost.1", "ghost.0", "early.1"]
    early = page["responses"][-1]
    assert early["status"] == "failed"
    assert early["error"] == {"why": "no order"}
    assert early["attempt"] == 1
    assert early["source"] == "http"
    assert early["truncated"] == []
    at = {k: datetime.fromisoformat(early[k]) for k in ("received_at", "recorded_at")}
    newest = datetime.fromisoformat(page["responses"][0]["received_at"])
    assert at["received_at"] + timedelta(seconds=5) == newest
    assert at["recorded_at"] >= newest + timedelta(seconds=BUFFER)
    assert page["responses"][0]["result"] == {"n": 4}
    assert await api.call("GET", "/v1/responses") == (200, page)  # outcome: by default

    items, _ = await _pages(api, "outcome=unmatched&limit=2")
    assert [r["correlation_key"] for r in items] == keys  # no gap, no repeat


async def test_a_large_result_is_cut_and_pages_stay_bounded(
        live: LiveFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paging, "PAGE_BYTES", 20_000)
    lv, clock = await _start(live)
    await _make_unmatched(lv, clock, {f"big.{i}": {"result": {"blob": "x" * 50_000},
                                                   "error": "e" * 6000} for i in range(8)})

    items, sizes = await _pages(lv.api, "outcome=unmatched&limit=1000")
    assert sorted(r["correlation_key"] for r in items) == [f"big.{i}" for i in range(8)]
    assert len(sizes) >= 3  # about 8.3 kB a response: two a page of 20,000 bytes
    assert max(sizes) <= 20_000
    for item in items:
        assert item["truncated"] == ["result", "error"]
        assert isinstance(item["result"], str)
        assert len(item["result"]) == responses_page.VALUE_CHARS
        assert item["result"].startswith('{"blob":')
        assert item["error"].startswith('"eee')


def _old_cursor(*parts: Any) -> str:
    """A cursor in the format given out before the readable one (base64 JSON)."""
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


LAST = "9" * 18  # the largest time and row id a cursor may hold (past 9999-12-31: the end)


@pytest.mark.parametrize(("query", "status"), [
    ("outcome=applied", 422), ("outcome=", 422), ("limit=0", 422), ("limit=1001", 422),
    ("limit=abc", 422), ("limit=1e400", 422), ("limit=99999999999999999999999", 422),
    ("name=q", 422), ("outcome=unmatched%00", 422), ("cursor=" + "A" * 501, 422),
    ("cursor=nonsense", 400), ("cursor=////", 400), ("cursor=e30", 400),
    ("cursor=5~x", 400), ("cursor=5~true", 400), ("cursor=5~-1", 400),
    ("cursor=5~" + "1" * 19, 400), ("cursor=" + "1" * 19 + "~5", 400),
    ("cursor=-5~5", 400), ("cursor=~5", 400), ("cursor=5~", 400), ("cursor=5", 400),
    ("cursor=1~2~3", 400), ("cursor=5~5%00", 422), ("cursor=%EF%BC%95~5", 400),
    ("cursor=" + "[" * 400, 400),
    (f"cursor={_old_cursor('2026-01-01T00:00:00+00:00', 5)}", 400),  # old cursors stop
    (f"cursor={LAST}~{LAST}", 200), ("cursor=0~0", 200), ("cursor=000~000", 200),
])
async def test_bad_query_values_are_refused(live: LiveFactory, query: str, status: int) -> None:
    api = (await live()).api
    got, body = await api.call("GET", f"/v1/responses?{query}")
    assert got == status, body
    if status == 200:
        assert body == {"responses": [], "next_cursor": None}
    else:
        assert body["error"]["code"] == ("invalid_cursor" if status == 400
                                         else "invalid_request"), body


async def test_it_needs_a_token_and_is_documented(live: LiveFactory) -> None:
    api = (await live()).api
    assert (await api.call("GET", "/v1/responses", token=None))[0] == 401
    assert (await api.call("GET", "/v1/responses", token="not-a-token"))[0] == 401
    assert (await api.call("GET", "/v1/responses", token=READER))[0] == 200
    assert (await api.call("POST", "/v1/responses", {}))[0] == 405
    status, document = await api.call("GET", "/openapi.json", token=None)
    assert status == 200
    operation = document["paths"]["/v1/responses"]["get"]
    assert {p["name"] for p in operation["parameters"]} == {"outcome", "limit", "cursor"}
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ResponsesPage"}

"""Every read is bounded in bytes (issue 46, finding 5), against a live daemon over
real sockets, on SQLite and PostgreSQL:

* ``GET /v1/job-search`` over many queues holding big jobs answers at most the
  byte bound: each found job's data, result and error are cut in SQL (never read
  whole), and the answer stops (``complete: false``) before it would pass the bound;
* a group pause's value is stored bounded (its start and a digest of the whole) and
  shown so, and stays exact: two long values sharing their start pause apart, and
  the engine, the waiting reason and the held counts agree on which jobs it holds.
"""

from __future__ import annotations

import asyncio
import json
import random
import string
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hipq.api import job_search
from hipq.store import Store
from tests.api.conftest import Api, Downstream, Live, LiveFactory, http_queue

BLOB = "x" * 200_000  # a job's data: 30 of them are 6 MB, over the 4 MiB bound
ANSWER_BYTES = 4 * 1024 * 1024  # an answer's bound (docs/security.md)
KEPT_CHARS, MAX_CHARS = 128, 200  # a group's start kept, its length at most (hipq.pause_scope)


async def _text(api: Api, path: str) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {api.token}"}
    async with api.session.get(api.base + path, headers=headers) as answer:
        return answer.status, await answer.text()


def _store(lv: Live) -> Store:
    assert lv.daemon.service is not None
    return lv.daemon.service.store


async def _thirty_queues_with_big_dups(api: Api) -> None:
    for n in range(30):
        queue = f"q{n:02d}"
        assert (await api.call("POST", "/v1/jobs", {"id": queue}))[0] == 201
        status, body = await api.call("PUT", f"/v1/jobs/{queue}/dup", {
            "data": {"blob": BLOB}, "run_after": "2999-01-01T00:00:00Z"})
        assert status == 201, body


async def test_job_search_over_big_jobs_is_bounded(live: LiveFactory,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    lv = await live()
    api = lv.api
    await _thirty_queues_with_big_dups(api)

    async def whole(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the search read a job whole")

    monkeypatch.setattr(type(_store(lv)), "job_get", whole)
    status, text = await _text(api, "/v1/job-search?id=dup")
    assert status == 200, text[:300]
    assert len(text.encode()) <= ANSWER_BYTES
    body = json.loads(text)
    assert [j["queue"] for j in body["jobs"]] == [f"q{n:02d}" for n in range(30)]
    assert body["complete"] is True
    for job in body["jobs"]:
        assert job["truncated"] == ["data"]
        assert job["data"] == json.dumps({"blob": BLOB})[:job_search.VALUE_CHARS] or (
            job["data"] == json.dumps({"blob": BLOB}, separators=(",", ":"))[
                :job_search.VALUE_CHARS])
        assert job["status"] == "queued"

    # a small bound: the answer stops before it, and says it is not complete
    monkeypatch.setattr(job_search, "PAGE_BYTES", 30_000)
    status, text = await _text(api, "/v1/job-search?id=dup")
    assert status == 200, text[:300]
    assert len(text.encode()) <= 30_000
    body = json.loads(text)
    assert body["complete"] is False
    assert 1 <= len(body["jobs"]) == body["searched"] < 30
    # one queue named: found whole when small, cut when big
    small = {"data": {"k": "v"}}
    assert (await api.call("PUT", "/v1/jobs/q00/small", small))[0] == 201
    body = (await api.call("GET", "/v1/job-search?id=small&name=q00"))[1]
    assert body["jobs"][0]["data"] == {"k": "v"}
    assert body["jobs"][0]["truncated"] == []


# -- group pauses with long values --------------------------------------------------

PREFIX = "k" * 150_000  # three API keys sharing their first 150,000 characters


def _key(tail: str) -> str:
    return PREFIX + tail


async def _refuse_a_and_b(body: dict[str, Any]) -> tuple[int, Any]:
    key = body["data"]["api_key"]
    return (429, {"error": "slow down"}) if key[-1] in "AB" else (200, {"ok": True})


async def _queue(api: Api, queue: str) -> tuple[dict[str, Any], int]:
    status, text = await _text(api, f"/v1/jobs/{queue}")
    assert status == 200, text[:300]
    return json.loads(text), len(text.encode())


async def _until(check: Any, within: float = 20.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        found = await check()
        if found:
            return found
        assert time.monotonic() < deadline, "never came"
        await asyncio.sleep(0.05)  # polling the API; there is no event to wait on


async def test_group_pauses_of_long_values_are_bounded_and_exact(
        live: LiveFactory, downstream: Downstream) -> None:
    downstream.reply = _refuse_a_and_b
    lv = await live()
    api = lv.api
    body = http_queue("grp", downstream.url, target={"mode": "sync"},
                      backoff={"scope": "group", "field": "api_key",
                               "initial_seconds": 120, "max_seconds": 120})
    assert (await api.call("POST", "/v1/jobs", body))[0] == 201
    jobs = [{"id": f"{t.lower()}1", "data": {"api_key": _key(t)}} for t in "ABC"]
    assert (await api.call("POST", "/v1/jobs/grp/batch", {"jobs": jobs}))[0] == 200
    await api.wait_job("grp", "c1", "succeeded")

    async def two_pauses() -> dict[str, Any] | None:
        queue, _ = await _queue(api, "grp")
        return queue if len(queue["backoff"]) == 2 else None

    await _until(two_pauses)
    # more jobs of each key: A's and B's wait for their own pause, C's go on
    more = [{"id": f"{t.lower()}2", "data": {"api_key": _key(t)}} for t in "ABC"]
    assert (await api.call("POST", "/v1/jobs/grp/batch", {"jobs": more}))[0] == 200
    await api.wait_job("grp", "c2", "succeeded")

    async def held_two() -> dict[str, Any] | None:  # a2 and b2 (a1, b1: not due yet)
        queue, _ = await _queue(api, "grp")
        return queue if queue["held"].get("backoff") == 2 else None

    queue = await _until(held_two)
    _, size = await _queue(api, "grp")
    assert size < 10_000  # the values are 150 KB each: none is shown whole
    groups = [p["group"] for p in queue["backoff"]]
    assert len(set(groups)) == 2
    for group in groups:
        assert group.startswith("k" * KEPT_CHARS)
        assert KEPT_CHARS < len(group) <= MAX_CHARS
    for job_id in ("a1", "a2", "b1", "b2"):
        job = await api.job("grp", job_id)
        assert job["status"] == "queued"
        assert job["attempt"] == 0  # throttled tries spend nothing
        # a1 and b1 were given back until their pause ends (not due before it)
        reason = "not_due" if job_id.endswith("1") else "backoff"
        assert job["waiting"]["reason"] == reason, job["waiting"]
    listing = (await api.call("GET", "/v1/jobs"))[1]
    assert len(json.dumps(listing)) < 20_000
    stored = await _store(lv).backoff_list(queues=["grp"])
    assert sorted(p.group or "" for p in stored) == sorted(groups)
    launched = [len(b["data"]["api_key"]) for b in downstream.received]
    assert set(launched) == {len(_key("A"))}  # the jobs were sent whole


# -- list pages count bytes, not characters ------------------------------------------

WIDE = "😀" * 250_000  # a megabyte of UTF-8 in 250,000 characters


async def test_list_pages_are_bounded_in_bytes_not_characters(live: LiveFactory) -> None:
    """A page's bound is in bytes: twelve jobs of 250,000 four-byte characters each
    (12 MB) fit in 4 Mi characters, but never in one answer."""
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", {"id": "wide"}))[0] == 201
    for n in range(12):
        raw = json.dumps({"data": {"blob": WIDE}, "run_after": "2999-01-01T00:00:00Z"},
                         ensure_ascii=False).encode()  # UTF-8 as it is: 1 MB
        status, body = await api.call("PUT", f"/v1/jobs/wide/w{n:02d}", raw=raw,
                                      headers={"Content-Type": "application/json"})
        assert status == 201, body
    seen: list[str] = []
    cursor = None
    for _ in range(20):
        path = "/v1/queued-jobs?name=wide&limit=1000" + (f"&cursor={cursor}" if cursor else "")
        status, text = await _text(api, path)
        assert status == 200, text[:300]
        assert len(text.encode()) <= ANSWER_BYTES
        page = json.loads(text)
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"w{n:02d}" for n in range(12)]


# -- one job's history ---------------------------------------------------------------

BIG_ERROR = {"detail": "e" * 400_000, "more": "m" * 400_000}  # a callback's, near 1 MiB


async def test_a_jobs_history_is_bounded_in_bytes(live: LiveFactory,
                                                  downstream: Downstream) -> None:
    """Six failed tries whose callbacks each sent a 0.8 MB error: the job's JSON
    reads each history entry's error cut in SQL (8 MB before), its start kept."""
    api = (await live()).api
    body = http_queue("h", downstream.url, attempts=6)
    assert (await api.call("POST", "/v1/jobs", body))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/h/j", {"data": {"k": "v"}}))[0] == 201
    for attempt in range(1, 7):
        await api.wait_job("h", "j", "running", check=lambda j, a=attempt: j["attempt"] == a)
        status, answer = await api.call("POST", "/v1/jobs/h/j", {
            "status": "failed", "attempt": attempt, "retryable": True, "error": BIG_ERROR})
        assert status in (200, 202), answer
    await api.wait_job("h", "j", "failed")
    status, text = await _text(api, "/v1/jobs/h/j")
    assert status == 200, text[:300]
    assert len(text.encode()) <= ANSWER_BYTES
    job = json.loads(text)
    assert len(job["history"]) == 6
    for entry in job["history"]:
        error = entry["error"]
        assert error["truncated"] is True
        assert error["detail"].startswith("eeee")
        assert len(json.dumps(error)) < 10_000


# -- other groups a producer's value names ------------------------------------------


def _noise(n: int, seed: int) -> str:
    """``n`` characters that do not compress (a repeated letter would fit an index)."""
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters) for _ in range(n))


async def test_a_huge_quota_value_is_stored_bounded(live: LiveFactory) -> None:
    """The quota field's value is stored with the job and indexed: a producer's
    20,000 characters are an enqueue like any other (PostgreSQL: no 500 from an
    index row too large, and the batch's other items stored)."""
    api = (await live()).api
    body = {"id": "quota", "concurrency": 2, "quotas": {"field": "tenant", "shares": {"a": 0.5}}}
    assert (await api.call("POST", "/v1/jobs", body))[0] == 201
    later = "2999-01-01T00:00:00Z"
    status, answer = await api.call("PUT", "/v1/jobs/quota/j1", {
        "data": {"tenant": _noise(20_000, 1)}, "run_after": later})
    assert status == 201, answer
    status, answer = await api.call("POST", "/v1/jobs/quota/batch", {"jobs": [
        {"id": "b1", "data": {"tenant": _noise(20_000, 2)}, "run_after": later},
        {"id": "b2", "data": {"tenant": "a"}, "run_after": later}]})
    assert status == 200, answer
    assert [j["status"] for j in answer["jobs"]] == ["created", "created"]
    assert (await api.job("quota", "j1"))["data"]["tenant"] == _noise(20_000, 1)


async def test_rate_groups_of_long_values_are_stored_bounded(
        live: LiveFactory, downstream: Downstream) -> None:
    """Each launch records its rate group, read back every tick: two 150,000-character
    values sharing their start are two bounded groups."""
    lv = await live()
    api = lv.api
    body = http_queue("rated", downstream.url, target={"mode": "sync"},
                      rate_limit={"launches": 5, "per_seconds": 60, "by": "api_key"})
    assert (await api.call("POST", "/v1/jobs", body))[0] == 201
    jobs = [{"id": f"r{t}", "data": {"api_key": _key(t)}} for t in "AB"]
    assert (await api.call("POST", "/v1/jobs/rated/batch", {"jobs": jobs}))[0] == 200
    for t in "AB":
        await api.wait_job("rated", f"r{t}", "succeeded")
    since = datetime.now(UTC) - timedelta(minutes=5)
    groups = await _store(lv).launch_events_recent(queue="rated", since=since)
    assert len(groups) == 2
    assert all(KEPT_CHARS < len(g) <= MAX_CHARS for g in groups)

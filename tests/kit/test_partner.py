"""hipq.downstream.partner, the fake partner that enforces its own contract
(docs/throttling.md, "The partner's word"): a real ``python -m
hipq.downstream.partner`` process hit over real sockets. Concurrency and
rate-window refusals per API key, the headers a refusal and a success carry, 503
and throttled-callback refusals, callback mode, stats and reset, a clean SIGTERM.
Budgets in cost, several windows and the header families:
tests/kit/test_partner_budgets.py."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDictProxy

from hipq.downstream.partner import PartnerError, PartnerProcess, key_of

pytestmark = pytest.mark.slow

Serve = Callable[[web.Application], Awaitable[str]]
Start = Callable[..., Awaitable[PartnerProcess]]
Answer = tuple[int, CIMultiDictProxy[str], Any]


@pytest.fixture
async def partner() -> AsyncIterator[Start]:
    """Start partner processes; each must then stop on SIGTERM with exit 0."""
    started: list[PartnerProcess] = []

    async def start(*args: str) -> PartnerProcess:
        started.append(await PartnerProcess.start(*args))
        return started[-1]

    yield start
    for process in started:
        assert await process.stop() == 0, process.stderr


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def launch(http: aiohttp.ClientSession, partner: PartnerProcess, key: str | None,
                 job: str = "j1", callback_url: str | None = None) -> Answer:
    """One launch the way hipq sends it (hipq/targets/http.py)."""
    data = {} if key is None else {"api_key": key}
    body = {"id": job, "queue": "q", "data": data, "attempt": 1, "max_attempts": 3,
            "correlation_key": f"ck-{job}", "callback_url": callback_url}
    async with http.post(f"{partner.url}/charge", json=body,
                         headers={"Hipq-Correlation-Key": f"ck-{job}"}) as response:
        return response.status, response.headers, await response.json()


def statuses(stats: dict[str, Any], key: str) -> list[int | str]:
    return sorted((status for _, k, status in stats["requests"] if k == key), key=str)


def test_key_of_follows_the_dotted_path() -> None:
    body = {"data": {"api_key": "k1", "tenant": {"id": 7}}, "queue": "q"}
    assert key_of(body, "data.api_key") == "k1"
    assert key_of(body, "data.tenant.id") == "7"
    assert key_of(body, "queue") == "q"
    assert key_of(body, "data.missing") == ""
    assert key_of(body, "queue.deeper") == ""
    assert key_of([1], "data.api_key") == ""


async def test_concurrency_refusal(partner: Start, http: aiohttp.ClientSession) -> None:
    p = await partner("--concurrency", "2", "--latency", "0.5", "--retry-after", "auto")
    answers = await asyncio.gather(*(launch(http, p, "a", f"j{i}") for i in range(5)))
    assert sorted(status for status, _, _ in answers) == [200, 200, 429, 429, 429]
    for status, headers, body in answers:
        if status == 200:
            assert body == {"ok": True}
            assert "Retry-After" not in headers
        else:
            assert headers["Retry-After"] == "1"  # auto, for a concurrency refusal
            assert body["reason"] == "concurrency"
    stats = await p.stats()
    assert (stats["accepted"], stats["refused"], stats["in_flight"]) == (2, 3, 0)
    assert (stats["max_in_flight"], stats["max_in_flight_by_key"]) == (2, {"a": 2})
    # the refused ones took nothing: two more fit at once again
    again = await asyncio.gather(launch(http, p, "a", "j5"), launch(http, p, "a", "j6"))
    assert [status for status, _, _ in again] == [200, 200]


async def test_rate_window_headers_and_retry_after(partner: Start,
                                                   http: aiohttp.ClientSession) -> None:
    p = await partner("--rate", "2", "--per-seconds", "3", "--latency", "0",
                      "--retry-after", "auto", "--ratelimit-headers", "--x-ratelimit-headers")
    answers = [await launch(http, p, "a", f"j{i}") for i in range(3)]
    assert [status for status, _, _ in answers] == [200, 200, 429]
    assert [h["RateLimit-Remaining"] for _, h, _ in answers] == ["1", "0", "0"]
    for _, headers, _ in answers:
        assert headers["RateLimit-Limit"] == "2"
        assert headers["RateLimit-Reset"] in ("2", "3")  # whole seconds left of 3, rounded up
        for name in ("Limit", "Remaining", "Reset"):
            assert headers[f"X-RateLimit-{name}"] == headers[f"RateLimit-{name}"]
    refused = answers[2][1]
    assert refused["Retry-After"] == refused["RateLimit-Reset"]
    assert "Retry-After" not in answers[0][1]
    other = await launch(http, p, "b")  # key a's spent window is not key b's
    assert (other[0], other[1]["RateLimit-Remaining"]) == (200, "1")

    deadline = time.monotonic() + 5
    while (answer := await launch(http, p, "a", "later"))[0] == 429:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert answer[0] == 200
    assert answer[1]["RateLimit-Remaining"] == "1"  # a new window, refusals not counted
    times = [at for at, key, status in (await p.stats())["requests"] if key == "a"]
    assert times[-1] - times[0] >= 3 - 0.05


async def test_503_refusal_carries_retry_after(partner: Start,
                                               http: aiohttp.ClientSession) -> None:
    p = await partner("--rate", "1", "--per-seconds", "5", "--latency", "0",
                      "--refuse-as", "503")  # --retry-after none: 503 still carries one
    assert (await launch(http, p, "a"))[0] == 200
    status, headers, body = await launch(http, p, "a")
    assert (status, body["reason"]) == (503, "rate")
    assert headers["Retry-After"] in ("4", "5")
    fixed = await partner("--concurrency", "1", "--latency", "0.3", "--refuse-as", "503",
                          "--retry-after", "7")
    answers = await asyncio.gather(launch(http, fixed, "a"), launch(http, fixed, "a"))
    assert sorted(status for status, _, _ in answers) == [200, 503]
    assert [h.get("Retry-After") for s, h, _ in answers if s == 503] == ["7"]


async def test_callback_mode_success_and_throttled(partner: Start, serve: Serve,
                                                   http: aiohttp.ClientSession) -> None:
    received: asyncio.Queue[tuple[str, str, Any]] = asyncio.Queue()
    failed_once: set[str] = set()

    async def callback(request: web.Request) -> web.Response:
        job = request.match_info["job"]
        await received.put((job, request.content_type, json.loads(await request.text())))
        if job == "flaky" and job not in failed_once:
            failed_once.add(job)
            return web.json_response({"error": "busy"}, status=503)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/callback/{job}", callback)
    receiver = await serve(app)
    p = await partner("--mode", "callback", "--concurrency", "1", "--latency", "0.3",
                      "--refuse-as", "callback", "--retry-after", "auto")

    started = time.monotonic()
    first = await launch(http, p, "a", "first", f"{receiver}/callback/first")
    assert (first[0], time.monotonic() - started < 0.3) == (202, True)  # answered at once
    assert (await p.stats())["in_flight"] == 1  # until its callback is sent
    second = await launch(http, p, "a", "second", f"{receiver}/callback/second")
    assert second[0] == 202
    assert await asyncio.wait_for(received.get(), 5) == (
        "second", "application/json", {"status": "throttled", "retry_after_seconds": 1})
    assert await asyncio.wait_for(received.get(), 5) == (
        "first", "application/json", {"status": "succeeded", "result": {"ok": True}})
    stats = await p.stats()
    assert [status for _, _, status in stats["requests"]] == [202, "callback-throttled"]
    assert (stats["accepted"], stats["refused"]) == (1, 1)

    deadline = time.monotonic() + 5
    while (await p.stats())["in_flight"]:  # released right after the callback's answer
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    assert (await launch(http, p, "a", "flaky", f"{receiver}/callback/flaky"))[0] == 202
    succeeded = {"status": "succeeded", "result": {"ok": True}}
    for _ in range(2):  # the 503 is tried again
        assert await asyncio.wait_for(received.get(), 5) == (
            "flaky", "application/json", succeeded)
    no_callback_url = await launch(http, p, "a", "nowhere")
    assert no_callback_url[0] == 400


async def test_keys_are_independent_and_stats_reset(partner: Start,
                                                    http: aiohttp.ClientSession) -> None:
    p = await partner("--concurrency", "1", "--rate", "1", "--per-seconds", "30",
                      "--latency", "0.3")
    answers = await asyncio.gather(launch(http, p, "a"), launch(http, p, "a"),
                                   launch(http, p, "b"), launch(http, p, None))
    assert "Retry-After" not in next(h for s, h, _ in answers if s == 429)  # none by default
    stats = await p.stats()
    assert (statuses(stats, "a"), statuses(stats, "b"), statuses(stats, "")) == (
        [200, 429], [200], [200])
    assert (stats["accepted"], stats["refused"], stats["max_in_flight"]) == (3, 1, 3)
    assert stats["max_in_flight_by_key"] == {"a": 1, "b": 1, "": 1}
    assert [len(entry) for entry in stats["requests"]] == [3] * 4
    assert all(abs(at - time.time()) < 10 for at, _, _ in stats["requests"])  # epoch seconds

    await p.reset()
    cleared = await p.stats()
    assert cleared == {"accepted": 0, "refused": 0, "max_in_flight": 0,
                       "max_in_flight_by_key": {}, "in_flight": 0, "requests": []}
    assert (await launch(http, p, "a"))[0] == 429  # the windows were kept
    assert (await launch(http, p, "c"))[0] == 200
    after = await p.stats()
    assert [(k, s) for _, k, s in after["requests"]] == [("a", 429), ("c", 200)]


async def test_sigterm_exits_cleanly_and_a_bad_start_says_why(
        http: aiohttp.ClientSession) -> None:
    async with await PartnerProcess.start("--latency", "0.2") as p:
        assert p.url.startswith("http://127.0.0.1:")
        in_flight = asyncio.create_task(launch(http, p, "a"))
        deadline = time.monotonic() + 5
        while not (await p.stats())["in_flight"]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert await p.stop() == 0
        assert (await in_flight)[0] == 200  # the open launch was answered first
        assert "Traceback" not in p.stderr
    at_once = await PartnerProcess.start()  # a signal right after the line is handled too
    assert await at_once.stop() == 0, at_once.stderr
    with pytest.raises(PartnerError, match="needs --mode callback"):
        await PartnerProcess.start("--refuse-as", "callback")

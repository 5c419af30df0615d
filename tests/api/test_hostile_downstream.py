"""A hostile or rude downstream (issue 13 finding 11; docs/security.md, "A hostile downstream"):
the HTTP target reads at most 64 KiB of an answer, follows no redirect, and a 429
or 503 with ``Retry-After`` is a throttled try (docs/throttling.md): given back, its attempt not
spent, the next try at the partner's time (never sooner than the queue's
``backoff.initial_seconds``). A downstream that holds its answers delays only its
own queue's launches (nobody blocks another job's launch). Real sockets on
127.0.0.1, a live daemon, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from aiohttp import web

from hipq.targets.http import MAX_ANSWER_BYTES
from hipq.testing import FakeClock
from tests.api.conftest import Api, Live, LiveFactory


class Rude:
    """A downstream whose answers the test sets per path."""

    def __init__(self) -> None:
        self.url = ""
        self.hits: dict[str, int] = {}
        self.retry_after: str = "120"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        self.hits[name] = self.hits.get(name, 0) + 1
        if name == "redirect":
            raise web.HTTPTemporaryRedirect(location=f"{self.url}/landing")
        if name == "big":  # 2 MiB of JSON-looking text
            return web.Response(body=b'{"blob": "' + b"y" * (2 * 1024 * 1024) + b'"}',
                                content_type="application/json")
        if name == "slow":  # holds its answer, within the target's timeout
            await asyncio.sleep(3)
        if name == "nul":
            return web.Response(body=b'{"text": "a\\u0000b", "n": 1e400}',
                                content_type="application/json")
        if name == "busy" and self.hits[name] == 1:
            return web.Response(status=429, headers={"Retry-After": self.retry_after})
        if name == "unavailable" and self.hits[name] == 1:
            return web.Response(status=503, headers={"Retry-After": self.retry_after})
        return web.json_response({"ok": True})


@pytest.fixture
async def rude() -> AsyncIterator[Rude]:
    server = Rude()
    app = web.Application()
    app.router.add_post("/{name}", server.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield server
    await runner.cleanup()


def _queue(queue_id: str, url: str, *, mode: str = "sync", attempts: int = 3) -> dict[str, Any]:
    return {"id": queue_id, "attempts": attempts,
            "target": {"kind": "http", "url": url, "mode": mode, "timeout_seconds": 5},
            "retry": {"strategy": "fixed", "delay_seconds": 1}}


async def test_answers_are_capped_at_64_kib(live: LiveFactory, rude: Rude) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", _queue("big", f"{rude.url}/big")))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/big/j", {}))[0] == 201
    job = await api.wait_job("big", "j", "succeeded")
    assert isinstance(job["result"], str)  # cut JSON is kept as text
    assert len(job["result"].encode()) <= MAX_ANSWER_BYTES
    assert job["result"].startswith('{"blob": "yyy')


async def test_an_unstorable_answer_is_kept_as_text(live: LiveFactory, rude: Rude) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", _queue("nul", f"{rude.url}/nul")))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/nul/j", {}))[0] == 201
    job = await api.wait_job("nul", "j", "succeeded")
    assert job["result"] == '{"text": "a\\u0000b", "n": 1e400}'


async def test_redirects_are_not_followed(live: LiveFactory, rude: Rude) -> None:
    api = (await live()).api
    body = _queue("r", f"{rude.url}/redirect", attempts=1)
    assert (await api.call("POST", "/v1/jobs", body))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/r/j", {}))[0] == 201
    job = await api.wait_job("r", "j", "failed")
    assert job["history"][0]["error"]["data"]["status"] == 307
    assert rude.hits.get("landing", 0) == 0  # the credentials never went elsewhere


async def _launch_and_fail_once(live: LiveFactory, rude: Rude, path: str
                                ) -> tuple[Live, Api, FakeClock, datetime]:
    clock = FakeClock()
    lv = await live(clock=clock)
    api = lv.api
    assert (await api.call("POST", "/v1/jobs", _queue("q", f"{rude.url}/{path}")))[0] == 201
    failed_at = clock.now()
    assert (await api.call("PUT", "/v1/jobs/q/j", {}))[0] == 201
    lv.daemon.wake()
    await api.wait_job("q", "j", "queued", check=lambda j: len(j["history"]) == 1)
    return lv, api, clock, failed_at


async def _launches_after(lv: Live, rude: Rude, clock: FakeClock, path: str,
                          seconds: float) -> int:
    """Move the clock, let the loop run a few ticks, return the launches so far."""
    clock.advance(seconds)
    for _ in range(5):
        lv.daemon.wake()
        await asyncio.sleep(0.05)  # a few real ticks of the loop; nothing to wait on
    return rude.hits.get(path, 0)


@pytest.mark.parametrize("path", ["busy", "unavailable"])
async def test_retry_after_seconds_delays_the_next_try(live: LiveFactory, rude: Rude,
                                                       path: str) -> None:
    rude.retry_after = "120"
    lv, api, clock, failed_at = await _launch_and_fail_once(live, rude, path)
    job = await api.job("q", "j")
    run_at = datetime.fromisoformat(job["run_at"])
    assert run_at >= failed_at + timedelta(seconds=120)  # not the strategy's 1 s
    assert job["attempt"] == 0  # given back: not spent
    assert job["history"][0]["outcome"] == "throttled"
    assert job["history"][0]["error"]["data"]["retry_after"] == 120
    assert await _launches_after(lv, rude, clock, path, 60) == 1
    clock.advance(61)
    deadline = time.monotonic() + 10
    while rude.hits.get(path, 0) < 2:
        assert time.monotonic() < deadline, "the retry never came"
        lv.daemon.wake()
        await asyncio.sleep(0.05)  # the loop runs in real time; polling its effect
    assert (await api.wait_job("q", "j", "succeeded"))["attempt"] == 1


async def test_retry_after_as_an_http_date(live: LiveFactory, rude: Rude) -> None:
    start = FakeClock().now()
    rude.retry_after = format_datetime(start + timedelta(seconds=300), usegmt=True)
    lv, api, clock, _ = await _launch_and_fail_once(live, rude, "busy")
    job = await api.job("q", "j")
    assert datetime.fromisoformat(job["run_at"]) >= start + timedelta(seconds=300)
    assert await _launches_after(lv, rude, clock, "busy", 200) == 1


async def test_a_retry_after_of_zero_waits_the_initial_back_off(live: LiveFactory,
                                                                rude: Rude) -> None:
    """``Retry-After: 0`` makes no hot loop: at least ``backoff.initial_seconds``."""
    rude.retry_after = "0"
    _, api, _, failed_at = await _launch_and_fail_once(live, rude, "busy")
    job = await api.job("q", "j")
    assert datetime.fromisoformat(job["run_at"]) >= failed_at + timedelta(seconds=1)


async def test_a_downstream_that_holds_its_answers_blocks_no_other_queue(
        live: LiveFactory, rude: Rude) -> None:
    """Every launch slot of the slow queue's target is taken (each send waits 3 s of
    its 5 s timeout, more jobs behind them): another queue's job is sent at once. The
    launch slots were shared by every target, and the other queue's job waited
    behind the slow one's in the same line."""
    lv = await live(reconcile={"launch_concurrency": 2})
    api = lv.api
    assert (await api.call("POST", "/v1/jobs", _queue("slow", f"{rude.url}/slow")))[0] == 201
    assert (await api.call("POST", "/v1/jobs", _queue("ok", f"{rude.url}/ok")))[0] == 201
    status, _ = await api.call("POST", "/v1/jobs/slow/batch",
                               {"jobs": [{"id": f"s{i}"} for i in range(6)]})
    assert status == 200
    deadline = time.monotonic() + 10
    while rude.hits.get("slow", 0) < 2:  # both slots of the slow target are busy
        assert time.monotonic() < deadline, "the slow launches never came"
        await asyncio.sleep(0.02)  # polling the downstream; there is no event to wait on
    sent = time.monotonic()
    assert (await api.call("PUT", "/v1/jobs/ok/j", {}))[0] == 201
    lv.daemon.wake()
    await api.wait_job("ok", "j", "succeeded")
    assert time.monotonic() - sent < 2.5  # not behind the slow answers (3 s and more)
    assert rude.hits.get("slow", 0) == 2  # the slow target still holds its own slots

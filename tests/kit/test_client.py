"""hipq.client against a real ``hipq run`` (SQLite and PostgreSQL): every method
of Client and AsyncClient, chunking past 10,000 jobs, cursor iteration, errors;
retries on 503 and connection errors, and the per-request timeout, against small
servers on 127.0.0.1 that misbehave on purpose."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from aiohttp import ClientSession, web

from hipq.client import ApiStatusError, AsyncClient, Client, RetryPolicy
from tests.api.conftest import ADMIN
from tests.kit.conftest import ROOT, HipqRun

pytestmark = pytest.mark.slow
Serve = Callable[[web.Application], Awaitable[str]]


def _sync_tour(url: str) -> None:
    with Client(url, token=ADMIN) as hipq:
        created = hipq.create_queue("mail", attempts=2, paused=True)
        assert (created.id, created.paused, created.config.attempts) == ("mail", True, 2)
        first = hipq.enqueue("mail", "m1", {"to": "a@example.com"}, priority=5)
        assert (first.status, first.job.id, first.job.priority) == ("created", "m1", 5)
        again = hipq.enqueue("mail", "m1", {"to": "a@example.com"}, priority=5)
        assert (again.status, again.job.created_at) == ("exists", first.job.created_at)
        with pytest.raises(ApiStatusError) as conflict:
            hipq.enqueue("mail", "m1", {"to": "b@example.com"})
        assert (conflict.value.status, conflict.value.code) == (409, "conflict")
        with pytest.raises(ApiStatusError) as missing:
            hipq.get_job("mail", "nope")
        assert (missing.value.status, missing.value.code) == (404, "job_not_found")
        assert "nope" in missing.value.message
        with pytest.raises(ApiStatusError) as no_queue:
            hipq.enqueue("nowhere", "x")
        assert no_queue.value.status == 404

        # 25,000 jobs: three batch calls (10,000 + 10,000 + 5,000), one result each
        jobs = [{"id": f"b{n:05d}", "data": {"n": n}} for n in range(25_000)]
        results = hipq.enqueue_many("mail", jobs)
        assert [r.id for r in results] == [j["id"] for j in jobs]
        assert {r.status for r in results} == {"created"}
        repeat = hipq.enqueue_many("mail", iter(jobs[9_990:10_010]))  # any iterable
        assert {r.status for r in repeat} == {"exists"}
        mixed = hipq.enqueue_many("mail", [{"id": "ok1"}, {"id": "b00001", "data": {"n": -1}}])
        assert [r.status for r in mixed] == ["created", "conflict"]
        assert hipq.get_queue("mail").stats is not None  # counts are cached up to 2 s
        assert hipq.get_job("mail", "b24999").data == {"n": 24999}

        fetched = hipq.get_job("mail", "b00007")
        assert (fetched.data, fetched.status, fetched.history) == ({"n": 7}, "queued", [])
        paused = hipq.pause("mail")
        assert paused.paused is True
        cancelled = [hipq.cancel("mail", f"b{n:05d}") for n in range(250)]
        assert {c.status for c in cancelled} == {"cancelled"}
        seen = [j.id for j in hipq.archived("mail", status="cancelled", page_size=40)]
        assert sorted(seen) == [f"b{n:05d}" for n in range(250)]  # 7 pages, no gap, no repeat
        assert [j.id for j in hipq.archived(page_size=1000)][:1] != []
        replayed = hipq.replay("mail", "b00003")
        assert (replayed.replay_of, replayed.data) == ("b00003", {"n": 3})
        assert hipq.resume("mail").paused is False
        stats = hipq.stats()
        assert [q.queue for q in stats.queues] == ["mail"]
        assert hipq.schedules() == []


async def test_sync_client_every_method(hipq_run: HipqRun) -> None:
    url = await hipq_run()
    await asyncio.to_thread(_sync_tour, url)


async def test_async_client_every_method(hipq_run: HipqRun) -> None:
    url = await hipq_run()
    async with AsyncClient(url, token=ADMIN) as hipq:
        assert (await hipq.create_queue("mail", paused=True)).paused is True
        assert (await hipq.enqueue("mail", "m1", {"k": 1})).status == "created"
        assert (await hipq.enqueue("mail", "m1", {"k": 1})).status == "exists"
        with pytest.raises(ApiStatusError) as conflict:
            await hipq.enqueue("mail", "m1", {"k": 2})
        assert conflict.value.status == 409
        jobs = ({"id": f"b{n:05d}", "data": {"n": n}} for n in range(12_000))
        results = await hipq.enqueue_many("mail", jobs)
        assert len(results) == 12_000
        assert {r.status for r in results} == {"created"}
        assert (await hipq.get_job("mail", "b11999")).data == {"n": 11999}
        assert (await hipq.pause("mail")).paused is True
        assert (await hipq.resume("mail")).paused is False
        assert (await hipq.pause("mail")).paused is True
        for n in range(30):
            assert (await hipq.cancel("mail", f"b{n:05d}")).status == "cancelled"
        seen = [j.id async for j in hipq.archived("mail", page_size=7)]
        assert sorted(seen) == [f"b{n:05d}" for n in range(30)]
        assert (await hipq.replay("mail", "b00001")).replay_of == "b00001"
        assert (await hipq.get_queue("mail")).stats is not None
        assert (await hipq.stats()).queues[0].queue == "mail"
        assert await hipq.schedules() == []
        with pytest.raises(ApiStatusError) as unauthorized:
            async with AsyncClient(url) as anonymous:
                await anonymous.stats()
        assert unauthorized.value.status == 401


async def test_client_input_errors_raise_before_sending(hipq_run: HipqRun) -> None:
    url = await hipq_run()
    async with AsyncClient(url, token=ADMIN) as hipq:
        await hipq.create_queue("q")
        with pytest.raises(ValueError, match="priority"):
            await hipq.enqueue("q", "j", priority="high")
        items: list[dict[str, Any]] = [{"id": "a"}, {"id": "has space"}, {"id": "b", "data": 3}]
        bad = await hipq.enqueue_many("q", items)
        assert [r.status for r in bad] == ["created", "invalid", "invalid"]


def _pages_app(pages: dict[str | None, dict[str, Any]], seen: list[dict[str, str]]
               ) -> web.Application:
    async def page(request: web.Request) -> web.Response:
        seen.append(dict(request.query))
        return web.json_response(pages[request.query.get("cursor")])

    app = web.Application()
    app.router.add_get("/v1/queued-jobs", page)
    return app


def _job(job_id: str, status: str) -> dict[str, Any]:
    stamp = "2026-01-05T12:00:00Z"
    return {"id": job_id, "queue": "q", "status": status, "data": {}, "attempt": 1,
            "max_attempts": 3, "run_at": stamp, "expires_at": None, "priority": 100,
            "weight": 1, "critical": False, "correlation_key": None, "ordering_key": None,
            "timeout_seconds": 60, "created_at": stamp, "updated_at": stamp}


async def test_list_jobs_follows_the_live_jobs_cursor(serve: Serve) -> None:
    """``GET /v1/queued-jobs`` (docs/http-api.md) pages, served here by a stand-in with the
    documented page shape: the client follows ``next_cursor`` to the end."""
    seen: list[dict[str, str]] = []
    pages: dict[str | None, dict[str, Any]] = {
        None: {"jobs": [_job("a", "running"), _job("b", "running")], "next_cursor": "c1"},
        "c1": {"jobs": [_job("c", "running")], "next_cursor": None}}
    url = await serve(_pages_app(pages, seen))
    async with AsyncClient(url) as hipq:
        assert [j.id async for j in hipq.list_jobs("q", "running", page_size=2)] == ["a", "b", "c"]

    def sync() -> list[str]:
        with Client(url) as hipq:
            return [j.id for j in hipq.list_jobs("q")]

    assert await asyncio.to_thread(sync) == ["a", "b", "c"]
    assert seen[0] == {"name": "q", "state": "running", "limit": "2"}
    assert seen[1] == {"name": "q", "state": "running", "limit": "2", "cursor": "c1"}
    assert seen[2]["state"] == "queued"


class RecordingClock:
    """Records the client's back-off waits instead of sleeping them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def now(self) -> Any:
        raise NotImplementedError

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)


def _flaky_proxy(upstream: str, failures: int, hits: list[str]) -> web.Application:
    """Answers 503 to the first ``failures`` requests, then forwards to ``upstream``."""

    async def forward(request: web.Request) -> web.Response:
        hits.append(request.path)
        if len(hits) <= failures:
            return web.json_response({"error": {"code": "store_unavailable",
                                                "message": "database unavailable"}}, status=503)
        async with ClientSession() as session, session.request(
                request.method, upstream + request.path_qs, headers=request.headers,
                data=await request.read()) as answer:
            return web.Response(status=answer.status, body=await answer.read(),
                                content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


async def test_retries_503_then_succeeds_then_gives_up(hipq_run: HipqRun, serve: Serve) -> None:
    url = await hipq_run()
    hits: list[str] = []
    proxy = await serve(_flaky_proxy(url, 2, hits))
    clock = RecordingClock()
    async with AsyncClient(proxy, token=ADMIN, clock=clock) as hipq:
        assert (await hipq.create_queue("q")).id == "q"  # third try reaches the daemon
        assert clock.waits == [0.5, 1.0]
        assert len(hits) == 3
    always = await serve(_flaky_proxy(url, 10**6, []))
    clock = RecordingClock()
    async with AsyncClient(always, token=ADMIN, clock=clock) as hipq:
        with pytest.raises(ApiStatusError) as gave_up:
            await hipq.enqueue("q", "j1")
    assert (gave_up.value.status, gave_up.value.code) == (503, "store_unavailable")
    assert clock.waits == [0.5, 1.0, 2.0]  # four tries, 3.5 s of back-off in all

    sync_waits: list[float] = []

    def sync() -> str:
        with Client(always, token=ADMIN, sleep=sync_waits.append) as hipq:
            try:
                hipq.stats()
            except ApiStatusError as exc:
                return exc.code
        return "no error"

    assert await asyncio.to_thread(sync) == "store_unavailable"
    assert sync_waits == [0.5, 1.0, 2.0]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_connection_errors_are_retried_then_raised() -> None:
    clock = RecordingClock()
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    async with AsyncClient(url, clock=clock) as hipq:
        with pytest.raises(httpx.ConnectError):
            await hipq.get_job("q", "j")
    assert clock.waits == [0.5, 1.0, 2.0]
    # the sync client, with fewer tries
    waits: list[float] = []
    with Client(url, sleep=waits.append, retry=RetryPolicy(tries=2)) as hipq, \
            pytest.raises(httpx.ConnectError):
        hipq.stats()
    assert waits == [0.5]


async def test_a_request_never_waits_longer_than_its_timeout(serve: Serve) -> None:
    arrived: list[str] = []
    release = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        arrived.append(request.path)
        await release.wait()
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hang)
    url = await serve(app)
    clock = RecordingClock()
    # 1 s, not less: on a loaded machine the local connect alone may take a few
    # hundred ms (a ConnectTimeout instead of the ReadTimeout this is about)
    async with AsyncClient(url, timeout=1.0, clock=clock) as hipq:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            await hipq.replay("q", "j")  # not idempotent: a timeout is not retried
        assert time.monotonic() - started < 3.0
        assert arrived == ["/v1/jobs/q/j/replay"]
        with pytest.raises(httpx.ReadTimeout):
            await hipq.get_job("q", "j")  # idempotent: retried, each try bounded
        assert len(arrived) == 5
    release.set()


def test_client_imports_no_daemon_stack() -> None:
    code = ("import sys, hipq.client, hipq.downstream; "
            "heavy = [m for m in ('sqlalchemy', 'aiokafka', 'asyncpg', 'aiosqlite', "
            "'apscheduler', 'hipq.store', 'hipq.daemon') if m in sys.modules]; "
            "assert not heavy, heavy; "
            "import hipq; assert hipq.Daemon.__name__ == 'Daemon'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)
    code = ("import sys, hipq.client; "
            "assert 'aiohttp' not in sys.modules and 'aiohttp.web' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_kit_public_surface() -> None:
    import hipq.client
    import hipq.downstream

    assert sorted(hipq.client.__all__) == sorted([
        "ApiStatusError", "AsyncClient", "BatchResult", "Client", "EnqueueResult", "HipqError",
        "JobOut", "QueueOut", "RetryPolicy", "ScheduleOut", "StatsOut"])
    assert sorted(hipq.downstream.__all__) == sorted([
        "Fail", "Handler", "KafkaResponder", "Launch", "callback_app"])
    # one name per class: the client's error is an ApiStatusError, and
    # hipq.client.HipqError is the root of hipq's errors itself, so
    # ``except hipq.client.HipqError`` catches it
    assert hipq.client.HipqError is hipq.HipqError
    assert issubclass(hipq.client.ApiStatusError, hipq.HipqError)

"""hipq.downstream.callback_app end to end: a real ``hipq run`` (SQLite and
PostgreSQL) launches HTTP jobs in callback mode into a callback_app on 127.0.0.1
that takes callbacks to that hipq only (``hipq_urls``). Success, ``Fail``, a
retryable exception then success, with hipq's launch credentials (``auth``) and
without them; heartbeats keeping a slow job alive past
``heartbeat_timeout_seconds``; and the callback delivery's retries against a
server that answers 503, then 2xx or 409. Hostile input: test_downstream_hostile."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from hipq.client import AsyncClient
from hipq.downstream import Fail, Launch, callback_app
from hipq.downstream.callback import WORKER
from hipq.testing import FakeClock
from tests.api.conftest import ADMIN
from tests.kit.conftest import HipqRun, http_target, wait_job
from tests.kit.test_client import Serve

pytestmark = pytest.mark.slow


async def test_callback_app_success_fail_and_retry(hipq_run: HipqRun, serve: Serve) -> None:
    calls: list[tuple[str, int]] = []

    async def handle(launch: Launch) -> dict[str, Any]:
        calls.append((launch.id, launch.attempt))
        assert launch.queue == "work"
        assert launch.max_attempts == 3
        assert launch.correlation_key
        if launch.data.get("fail"):
            raise Fail("the card was declined", details={"reason": "declined"})
        if launch.data.get("flaky") and launch.attempt == 1:
            raise RuntimeError("upstream hiccup")
        return {"doubled": launch.data["n"] * 2}

    url = await hipq_run()
    auth = {"type": "bearer", "token": "launch-secret"}
    downstream = await serve(callback_app(handle, hipq_urls=url, auth=auth))
    async with AsyncClient(url, token=ADMIN) as hipq:
        await hipq.create_queue("work", attempts=3, target=http_target(downstream, auth=auth),
                                retry={"strategy": "fixed", "delay_seconds": 0.05})
        await hipq.create_queue("nocreds", attempts=3, target=http_target(downstream))
        await hipq.enqueue("nocreds", "n1", {"n": 1})
        await hipq.enqueue("work", "ok", {"n": 21})
        await hipq.enqueue("work", "declined", {"n": 1, "fail": True})
        await hipq.enqueue("work", "flaky", {"n": 5, "flaky": True})
        ok = await wait_job(hipq, "work", "ok", "succeeded", "failed")
        assert (ok.status, ok.result, ok.attempt) == ("succeeded", {"doubled": 42}, 1)
        declined = await wait_job(hipq, "work", "declined", "succeeded", "failed")
        assert (declined.status, declined.attempt) == ("failed", 1)  # not retried
        assert declined.error is not None
        assert "the card was declined" in str(declined.error)
        flaky = await wait_job(hipq, "work", "flaky", "succeeded", "failed")
        assert (flaky.status, flaky.attempt, flaky.result) == ("succeeded", 2, {"doubled": 10})
        assert flaky.history[0].outcome != "succeeded"
        nocreds = await wait_job(hipq, "nocreds", "n1", "succeeded", "failed")
        assert (nocreds.status, nocreds.attempt) == ("failed", 1)  # 401: not retried
        assert "401" in str(nocreds.history[0].error)
    assert sorted(calls) == [("declined", 1), ("flaky", 1), ("flaky", 2), ("ok", 1)]


async def test_heartbeats_keep_a_slow_job_alive(hipq_run: HipqRun, serve: Serve) -> None:
    """heartbeat_timeout_seconds is 1 s; the handler takes about 3 s (it returns once
    the test has seen the job still running after 2.5 s) and beats every 0.2 s."""
    release = asyncio.Event()

    async def handle(launch: Launch) -> str:
        await release.wait()
        return "done"

    url = await hipq_run()
    downstream = await serve(callback_app(handle, hipq_urls=url, heartbeat_seconds=0.2))
    async with AsyncClient(url, token=ADMIN) as hipq:
        await hipq.create_queue("slow", attempts=1, heartbeat_timeout_seconds=1,
                                target=http_target(downstream))
        await hipq.enqueue("slow", "s1")
        running = await wait_job(hipq, "slow", "s1", "running")
        assert running.launched_at is not None
        started = time.monotonic()
        while time.monotonic() - started < 2.5:  # more than twice the heartbeat timeout
            assert (await hipq.get_job("slow", "s1")).status == "running"
            await asyncio.sleep(0.1)  # watching the job stay alive: real time is the point
        release.set()
        job = await wait_job(hipq, "slow", "s1", "succeeded", "failed")
        assert (job.status, job.result, job.attempt) == ("succeeded", "done", 1)


async def test_without_heartbeats_the_same_job_times_out(hipq_run: HipqRun,
                                                         serve: Serve) -> None:
    release = asyncio.Event()

    async def handle(launch: Launch) -> str:
        await release.wait()
        return "done"

    url = await hipq_run()
    downstream = await serve(callback_app(handle, hipq_urls=url))
    async with AsyncClient(url, token=ADMIN) as hipq:
        await hipq.create_queue("slow", attempts=1, heartbeat_timeout_seconds=1,
                                target=http_target(downstream))
        await hipq.enqueue("slow", "s1")
        job = await wait_job(hipq, "slow", "s1", "succeeded", "failed")
        assert job.status == "failed"
        release.set()


async def test_callback_delivery_retries_until_2xx_or_409(serve: Serve) -> None:
    answers: list[int] = []
    bodies: list[Any] = []
    script: list[int] = []

    async def hipq_side(request: web.Request) -> web.Response:
        bodies.append(await request.json())
        status = script.pop(0)
        answers.append(status)
        return web.json_response({}, status=status)

    app = web.Application()
    app.router.add_post("/v1/responses/{key}", hipq_side)
    hipq = await serve(app)

    async def handle(launch: Launch) -> int:
        return 1

    clock = FakeClock()
    downstream = callback_app(handle, hipq_urls=hipq, clock=clock)
    await serve(downstream)  # starts its client session
    worker = downstream[WORKER]
    url = URL(f"{hipq}/v1/responses/k?attempt=1&sig=x")
    body = b'{"status":"succeeded"}'
    script[:] = [503, 500, 202]
    await worker.deliver(url, body)
    assert answers == [503, 500, 202]
    script[:] = [503, 409]
    await worker.deliver(url, body)
    assert answers[3:] == [503, 409]
    script[:] = [401]  # a refusal no retry can change: dropped
    await worker.deliver(url, body)
    assert answers[5:] == [401]
    script[:] = [429, 200]
    await worker.deliver(url, body)
    assert answers[6:] == [429, 200]
    assert all(b == {"status": "succeeded"} for b in bodies)


async def test_a_post_that_is_not_a_launch_gets_400(serve: Serve) -> None:
    async def handle(launch: Launch) -> None:
        raise AssertionError("never called")

    url = await serve(callback_app(handle, hipq_urls="http://127.0.0.1:8080"))
    launch = {"id": "x", "queue": "q", "attempt": 1, "max_attempts": 1, "correlation_key": "k"}
    async with aiohttp.ClientSession() as session:
        for body in ([1, 2], {"id": "x"}, launch, {**launch, "callback_url": 8080},
                     {**launch, "callback_url": ["http://127.0.0.1:8080/v1"]}):
            async with session.post(f"{url}/anything", json=body) as answer:
                assert answer.status == 400, await answer.text()
        for raw in (b"not json", b"[" * 100_000, b'{"id": "\xff"}'):
            async with session.post(f"{url}/x", data=raw) as answer:
                assert answer.status == 400

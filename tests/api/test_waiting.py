"""Why a job waits (docs/throttling.md): ``GET /v1/jobs/{queue}/{id}`` of a queued job carries
``"waiting": {"reason", "detail", "until"}`` computed from the database; one test per
reason, in the order they are checked, on SQLite and PostgreSQL.

The API is served on 127.0.0.1 by a service with a fake clock; running jobs come
from a reconciler (same store, same clock) launching into a memory target, ticked
by hand, so nothing moves unless a test moves it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import aiohttp
import pytest

from hipq.api.app import openapi_document
from hipq.api.deps import ApiDeps
from hipq.api.server import ApiServer
from hipq.bodies import EnqueueRequest
from hipq.config import ApiConfig, TokenConfig
from hipq.engine import Reconciler
from hipq.responses.signing import Signer
from hipq.service import Hipq
from hipq.store import Store
from hipq.store.records import Backoff, QueueState
from hipq.targets import Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.api.conftest import ADMIN
from tests.engine._helpers import enqueue, queue, tick


@dataclass
class World:
    hipq: Hipq
    store: Store
    clock: FakeClock
    reconciler: Reconciler
    session: aiohttp.ClientSession
    base: str

    async def job(self, job_id: str, queue_id: str = "q") -> dict[str, Any]:
        async with self.session.get(f"{self.base}/v1/jobs/{queue_id}/{job_id}",
                                    headers={"Authorization": f"Bearer {ADMIN}"}) as answer:
            assert answer.status == 200, await answer.text()
            body: dict[str, Any] = await answer.json()
            return body

    async def waiting(self, job_id: str, queue_id: str = "q") -> dict[str, Any] | None:
        found: dict[str, Any] | None = (await self.job(job_id, queue_id))["waiting"]
        return found

    async def reason(self, job_id: str, queue_id: str = "q") -> str:
        waiting = await self.waiting(job_id, queue_id)
        assert waiting is not None
        return str(waiting["reason"])

    async def detail(self, job_id: str, queue_id: str = "q") -> str:
        waiting = await self.waiting(job_id, queue_id)
        assert waiting is not None
        return str(waiting["detail"])

    async def tick(self) -> int:
        return (await tick(self.reconciler)).launched


@pytest.fixture
async def w(store: Store, clock: FakeClock) -> AsyncIterator[World]:
    hipq = Hipq(store, clock=clock)
    reconciler = Reconciler(store, clock=clock, owner="o1",
                            targets=Targets(memory={"t": MemoryTarget()}))
    config = ApiConfig(port=0, tokens=[TokenConfig(token=ADMIN, role="admin")])
    server = ApiServer(ApiDeps(service=hipq, config=config, signer=Signer("k")))
    port = await server.start()
    async with aiohttp.ClientSession() as session:
        yield World(hipq=hipq, store=store, clock=clock, reconciler=reconciler,
                    session=session, base=f"http://127.0.0.1:{port}")
    await server.stop()


async def test_paused(w: World) -> None:
    await w.hipq.create_queue(queue())
    await enqueue(w.hipq, "a")
    await enqueue(w.hipq, "later", run_after=w.clock.now() + timedelta(hours=1))
    await w.hipq.set_paused("q", True)
    assert await w.waiting("a") == {"reason": "paused", "detail": "queue paused",
                                    "until": None}
    assert await w.reason("later") == "paused"  # checked first
    await w.hipq.set_paused("q", False)
    assert await w.reason("a") == "position"


async def test_not_due(w: World) -> None:
    await w.hipq.create_queue(queue())
    run_at = w.clock.now() + timedelta(minutes=5)
    await enqueue(w.hipq, "a", run_after=run_at)
    waiting = await w.waiting("a")
    assert waiting == {"reason": "not_due", "detail": "due at 2026-01-05T12:05:00Z",
                       "until": "2026-01-05T12:05:00Z"}
    w.clock.advance(minutes=5)
    assert await w.reason("a") == "position"


async def test_backoff_of_the_job_s_group_or_of_the_whole_queue(w: World) -> None:
    now = w.clock.now()
    await w.hipq.create_queue(queue(backoff={"scope": "group", "field": "tenant"}))
    await enqueue(w.hipq, "x", data={"tenant": "x"})
    await enqueue(w.hipq, "y", data={"tenant": "y"})
    await enqueue(w.hipq, "none", data={})
    reason = "HTTP 429 from http://127.0.0.1:9000"
    await w.store.backoff_replace(queue="q", backoffs=[
        Backoff(queue="q", group="x", until=now + timedelta(seconds=30), reason=reason,
                since=now),
        Backoff(queue="q", group="", until=now + timedelta(seconds=5), reason="budget spent",
                since=now),
        Backoff(queue="q", group="y", until=now - timedelta(seconds=1), reason=reason,
                since=now - timedelta(seconds=9))])  # passed: holds no one
    assert await w.waiting("x") == {"reason": "backoff", "detail": reason,
                                    "until": "2026-01-05T12:00:30Z"}
    assert await w.waiting("none") == {"reason": "backoff", "detail": "budget spent",
                                       "until": "2026-01-05T12:00:05Z"}  # missing: group ""
    assert await w.reason("y") == "position"

    await w.store.backoff_replace(queue="q", backoffs=[
        Backoff(queue="q", group=None, until=now + timedelta(seconds=60), reason=reason,
                since=now)])
    for job_id in ("x", "y", "none"):
        assert await w.waiting(job_id) == {"reason": "backoff", "detail": reason,
                                           "until": "2026-01-05T12:01:00Z"}


async def test_window(w: World) -> None:
    # 12:00 UTC is 13:00 in Paris (winter): open now, closed from 14:00
    await w.hipq.create_queue(queue(timezone="Europe/Paris",
                                    time_windows=[{"start": "13:00", "end": "14:00"}]))
    await enqueue(w.hipq, "a")
    assert await w.reason("a") == "position"
    w.clock.advance(minutes=90)  # 14:30 in Paris; no tick has rescheduled it yet
    assert await w.waiting("a") == {"reason": "window",
                                    "detail": "window closed until 13:00 Europe/Paris",
                                    "until": "2026-01-06T12:00:00Z"}
    # the job's own windows win over the queue's
    await enqueue(w.hipq, "own", time_windows=[{"start": "13:30", "end": "13:45"}],
                  timezone="UTC")
    assert await w.reason("own") == "position"


async def test_ordering_key(w: World) -> None:
    await w.hipq.create_queue(queue(concurrency=5))
    for job_id in ("k1", "k2", "k3"):
        await enqueue(w.hipq, job_id, ordering_key="acct-1")
        w.clock.advance(1)
    await enqueue(w.hipq, "other", ordering_key="acct-2")
    assert await w.reason("k1") == "position"
    assert await w.waiting("k2") == {"reason": "ordering_key",
                                     "detail": "behind job k1 of key acct-1", "until": None}
    assert await w.tick() == 2  # k1 and other
    assert await w.waiting("k1") is None  # running
    assert await w.detail("k3") == "behind job k1 of key acct-1"  # running
    assert await w.waiting("other") is None


async def test_rate_limit(w: World) -> None:
    await w.hipq.create_queue(queue(concurrency=10,
                                    rate_limit={"launches": 2, "per_seconds": 60}))
    for job_id in ("a", "b", "c"):
        await enqueue(w.hipq, job_id)
    assert await w.tick() == 2
    w.clock.advance(10)
    assert await w.waiting("c") == {"reason": "rate_limit",
                                    "detail": "rate limit 2 per 60s reached",
                                    "until": "2026-01-05T12:01:00Z"}
    await enqueue(w.hipq, "vip", critical=True)  # not rate limited
    assert await w.waiting("vip") == {"reason": "position", "detail": "due, behind 1 job",
                                      "until": None}
    w.clock.advance(50)
    assert await w.reason("c") == "position"


async def test_rate_limit_per_group(w: World) -> None:
    await w.hipq.create_queue(queue(concurrency=10, rate_limit={
        "launches": 1, "per_seconds": 30, "by": "api"}))
    await enqueue(w.hipq, "x1", data={"api": "x"})
    await enqueue(w.hipq, "x2", data={"api": "x"})
    await enqueue(w.hipq, "y1", data={"api": "y"})
    assert await w.tick() == 2  # x1 and y1
    await enqueue(w.hipq, "y2", data={"api": "y"})
    await enqueue(w.hipq, "z", data={"api": "z"})
    assert await w.waiting("x2") == {"reason": "rate_limit",
                                     "detail": "rate limit 1 per 30s reached for x",
                                     "until": "2026-01-05T12:00:30Z"}
    assert await w.detail("y2") == "rate limit 1 per 30s reached for y"
    assert await w.reason("z") == "position"


async def test_quota(w: World) -> None:
    await w.hipq.create_queue(queue(concurrency=10, quotas={
        "field": "region", "shares": {"east": 0.2, "west": 0.5}}))
    for job_id in ("e1", "e2", "e3"):
        await enqueue(w.hipq, job_id, data={"region": "east"})
    assert await w.tick() == 2  # east's share is 2 units
    await enqueue(w.hipq, "w1", data={"region": "west"})
    await enqueue(w.hipq, "vip", data={"region": "east"}, critical=True)  # skips quotas
    assert await w.waiting("e3") == {"reason": "quota", "detail": "quota east at 2 of 2",
                                     "until": None}
    assert await w.reason("w1") == "position"
    assert await w.reason("vip") == "position"
    for job_id in ("n1", "n2", "n3", "n4"):  # unlisted: the default group's 3 units
        await enqueue(w.hipq, job_id, data={"region": "north"})
    await w.tick()
    assert await w.detail("n4") == "quota of the default group at 3 of 3"


async def test_concurrency(w: World) -> None:
    await w.hipq.create_queue(queue(concurrency=3, critical_concurrency=1))
    await enqueue(w.hipq, "heavy", weight=2)
    w.clock.advance(1)
    for job_id in ("a", "b"):
        await enqueue(w.hipq, job_id)
    for job_id in ("vip1", "vip2"):
        await enqueue(w.hipq, job_id, critical=True)
    assert await w.tick() == 3  # heavy, a and vip1
    assert await w.waiting("b") == {"reason": "concurrency", "detail": "running 3 of 3",
                                    "until": None}
    assert await w.waiting("vip2") == {"reason": "concurrency",
                                       "detail": "running 1 of 1 (critical)", "until": None}


async def test_concurrency_under_the_adaptive_limit(w: World) -> None:
    await w.hipq.create_queue(queue(concurrency=4, adaptive={"min": 1}))
    await w.store.queue_state_save([QueueState(queue="q", effective=2.6)])
    for job_id in ("a", "b", "c"):
        await enqueue(w.hipq, job_id)
    assert await w.tick() == 2
    assert await w.waiting("c") == {"reason": "concurrency",
                                    "detail": "running 2 of 2 (adaptive; configured 4)",
                                    "until": None}


async def test_position_in_the_queue_s_order(w: World) -> None:
    await w.hipq.create_queue(queue())
    for job_id in ("a", "b", "c"):
        await enqueue(w.hipq, job_id)
    await enqueue(w.hipq, "later", run_after=w.clock.now() + timedelta(seconds=1))
    w.clock.advance(2)
    assert await w.waiting("a") == {"reason": "position", "detail": "due, next in line",
                                    "until": None}
    assert await w.detail("b") == "due, behind 1 job"
    assert await w.detail("later") == "due, behind 3 jobs"

    await w.hipq.create_queue(queue("p", ordering="priority_then_time"))
    await enqueue(w.hipq, "low", "p", priority=200)
    await enqueue(w.hipq, "high", "p", priority=1)
    await enqueue(w.hipq, "future", "p", priority=0,
                  run_after=w.clock.now() + timedelta(hours=1))  # not due: not counted
    assert await w.detail("high", "p") == "due, next in line"
    assert await w.detail("low", "p") == "due, behind 1 job"


async def test_position_is_counted_up_to_ten_thousand(w: World) -> None:
    await w.hipq.create_queue(queue())
    await w.hipq.enqueue_many("q", [(f"j{i:05d}", EnqueueRequest()) for i in range(10_001)])
    await enqueue(w.hipq, "last")
    assert await w.detail("j10000") == "due, behind 10000 jobs"
    assert await w.detail("last") == "due, behind 10000+ jobs"


async def test_null_once_it_runs_or_ends(w: World) -> None:
    await w.hipq.create_queue(queue(concurrency=1))
    await enqueue(w.hipq, "a")
    await enqueue(w.hipq, "b")
    await w.tick()
    assert await w.waiting("a") is None
    await w.hipq.cancel("q", "b")
    assert (await w.job("b"))["status"] == "cancelled"
    assert await w.waiting("b") is None


def test_the_api_document_describes_waiting() -> None:
    schemas = openapi_document()["components"]["schemas"]
    job = schemas["JobOut"]["properties"]["waiting"]
    assert "WaitingOut" in str(job)
    assert set(schemas["WaitingOut"]["properties"]) == {"reason", "detail", "until"}

"""The partner's word with a real partner (docs/throttling.md): the fake partner of
``hipq.downstream.partner`` in its own process, live daemons on real sockets,
SQLite and PostgreSQL. What the partner received (its own log) is the proof."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from hipq.downstream.partner import PartnerProcess
from tests.api.conftest import Api, LiveFactory

pytestmark = pytest.mark.slow

Partner = Callable[..., Awaitable[PartnerProcess]]


@pytest.fixture
async def partner() -> AsyncIterator[Partner]:
    started: list[PartnerProcess] = []

    async def start(*args: str) -> PartnerProcess:
        process = await PartnerProcess.start(*args)
        started.append(process)
        return process

    yield start
    for process in started:
        await process.stop()


def partner_queue(url: str, **extra: Any) -> dict[str, Any]:
    return {"id": "p", "attempts": 3, "concurrency": 1,
            "target": {"kind": "http", "url": url + "/v1/{queue}/{id}", "mode": "sync",
                       "timeout_seconds": 5}, **extra}


async def enqueue(api: Api, jobs: list[dict[str, Any]]) -> None:
    status, body = await api.call("POST", "/v1/jobs/p/batch", {"jobs": jobs})
    assert status == 200, body


async def all_succeeded(api: Api, ids: list[str], within: float = 30.0) -> None:
    for job_id in ids:
        await api.wait_job("p", job_id, "succeeded", within=within)


def requests(stats: dict[str, Any], key: str | None = None) -> list[tuple[float, int]]:
    """(arrival time, status) of the partner's requests (of one API key)."""
    return [(at, status) for at, k, status in stats["requests"]
            if key is None or k == key]


def quiet_after_refusals(log: list[tuple[float, int]], seconds: float) -> None:
    """After each refusal, no request arrives for ``seconds`` (the one in flight
    with it aside: concurrency 1 here, so none)."""
    for i, (at, status) in enumerate(log):
        if status == 429 and i + 1 < len(log):
            gap = log[i + 1][0] - at
            assert gap >= seconds, f"a request {gap:.2f}s after a 429: {log}"


async def test_a_retry_after_of_4_pauses_the_queue_for_every_daemon(
        live: LiveFactory, partner: Partner, backend: str) -> None:
    """A 429 with ``Retry-After: 4``: no request reaches the partner for the next 3.5 s,
    and the owner handing the queue over meanwhile changes nothing (PostgreSQL: a
    second daemon takes it over and keeps the pause)."""
    p = await partner("--rate", "1", "--per-seconds", "4", "--retry-after", "4")
    first = await live(reconcile={"lease_seconds": 3})
    api = first.api
    assert (await api.call("POST", "/v1/jobs", partner_queue(p.url)))[0] == 201
    await enqueue(api, [{"id": f"j{i}"} for i in range(3)])
    deadline = time.monotonic() + 15
    while not any(s == 429 for _, s in requests(await p.stats())):
        assert time.monotonic() < deadline, await p.stats()
        await asyncio.sleep(0.05)  # polling the partner's log
    if backend == "postgresql":  # hand over to a second daemon during the pause
        second = await live(reconcile={"lease_seconds": 3})
        first.stop.set()
        await asyncio.wait_for(first.task, 30)
        api = second.api
    await all_succeeded(api, ["j0", "j1", "j2"], within=40)
    log = requests(await p.stats())
    assert sum(1 for _, s in log if s == 429) >= 1
    quiet_after_refusals(log, 3.5)
    for job_id in ("j0", "j1", "j2"):
        job = await api.job("p", job_id)
        assert job["attempt"] == 1  # the throttled tries spent nothing


async def test_group_scope_pauses_only_its_group(live: LiveFactory, partner: Partner) -> None:
    p = await partner("--rate", "1", "--per-seconds", "4", "--retry-after", "4")
    api = (await live()).api
    body = partner_queue(p.url, concurrency=2,
                         backoff={"scope": "group", "field": "api_key"})
    assert (await api.call("POST", "/v1/jobs", body))[0] == 201
    await enqueue(api, [{"id": "a1", "data": {"api_key": "a"}},
                        {"id": "a2", "data": {"api_key": "a"}}])
    deadline = time.monotonic() + 15
    while not any(s == 429 for _, s in requests(await p.stats(), "a")):
        assert time.monotonic() < deadline, await p.stats()
        await asyncio.sleep(0.05)  # polling the partner's log
    refused_at = next(at for at, s in requests(await p.stats(), "a") if s == 429)
    await enqueue(api, [{"id": "b1", "data": {"api_key": "b"}}])
    await api.wait_job("p", "b1", "succeeded", within=10)
    b_at = requests(await p.stats(), "b")[0][0]
    assert b_at - refused_at < 3.0  # b went on during a's pause
    await all_succeeded(api, ["a1", "a2"], within=30)
    quiet_after_refusals(requests(await p.stats(), "a"), 3.5)


async def test_a_spent_budget_pauses_before_any_refusal(live: LiveFactory,
                                                        partner: Partner) -> None:
    """``RateLimit-Remaining: 0`` with ``RateLimit-Reset: 3``: no request for the next
    2.5 s, and the partner never has to answer 429."""
    p = await partner("--rate", "2", "--per-seconds", "3", "--ratelimit-headers")
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", partner_queue(p.url)))[0] == 201
    ids = [f"j{i}" for i in range(6)]
    await enqueue(api, [{"id": i} for i in ids])
    await all_succeeded(api, ids, within=40)
    stats = await p.stats()
    assert stats["refused"] == 0
    log = requests(stats)
    assert [s for _, s in log] == [200] * 6
    for i in (1, 3):  # the second of each window spent the budget
        assert log[i + 1][0] - log[i][0] >= 2.5, log

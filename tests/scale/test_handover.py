"""Clean handovers between real daemons (PostgreSQL, an HTTP callback downstream):
confirmed launches keep waiting for their responses, nothing is re-sent or lost,
and a concurrency limit holds as the downstream sees it."""

from __future__ import annotations

import asyncio

import aiohttp
import asyncpg
import pytest

from tests.scale.cluster import (
    Downstream,
    enqueue_batch,
    http_queue,
    job_counts,
    wait_until,
)
from tests.scale.conftest import LEASE_SECONDS

pytestmark = pytest.mark.slow


async def _confirmed_running(pg: str) -> int:
    conn = await asyncpg.connect(pg)
    try:
        return int(await conn.fetchval(
            "SELECT count(*) FROM jobs WHERE status = 'running' AND launch_confirmed"))
    finally:
        await conn.close()


async def _history(pg: str) -> list[tuple[str, int, str]]:
    conn = await asyncpg.connect(pg)
    try:
        rows = await conn.fetch(
            "SELECT job_id AS id, attempt, outcome FROM job_attempts ORDER BY job_id")
    finally:
        await conn.close()
    return [(r["id"], r["attempt"], r["outcome"]) for r in rows]


async def test_sigterm_handover_of_twenty_confirmed_running_jobs(
        make_cluster, downstream: Downstream) -> None:  # type: ignore[no-untyped-def]
    downstream.answer = False  # the test answers, after the handover
    cluster = make_cluster([http_queue("q", downstream.url, concurrency=50)])
    downstream.cluster = cluster
    first = cluster.start()
    await cluster.wait_serving(first)
    async with aiohttp.ClientSession() as session:
        await enqueue_batch(session, first, "q", [f"j{i:02d}" for i in range(20)])
    await downstream.wait_for(20)
    await wait_until(lambda: _is(_confirmed_running(cluster.pg), 20), 10, "20 confirmed")
    second = cluster.start()
    await cluster.wait_serving(second)

    assert await cluster.stop(first) == 0
    await wait_until(lambda: _owns(cluster, second.number, "q"), LEASE_SECONDS, "handover")
    for launch in downstream.launches:  # answered at the new owner (signed URLs verify)
        await downstream.respond(launch, {"result": {"done": launch.id}})
    await wait_until(lambda: _is(_archived(cluster.pg), 20), 10, "all 20 archived")

    counts = await job_counts(cluster.pg)
    assert counts == {"succeeded": 20}, counts
    history = await _history(cluster.pg)
    assert sorted(history) == [(f"j{i:02d}", 1, "succeeded") for i in range(20)], history
    assert len(downstream.launches) == 20  # nothing re-sent
    assert sorted(launch.id for launch in downstream.launches) == [
        f"j{i:02d}" for i in range(20)]


async def test_concurrency_holds_across_handovers(
        make_cluster, downstream: Downstream) -> None:  # type: ignore[no-untyped-def]
    """Queue ``b-limited`` (concurrency 3) is handed over twice while jobs flow: once
    when a second daemon joins (the first one is over its share), once by SIGTERM."""
    downstream.delay = 0.1
    cluster = make_cluster([http_queue("a-other", downstream.url, concurrency=5),
                            http_queue("b-limited", downstream.url, concurrency=3)])
    downstream.cluster = cluster
    first = cluster.start()
    await cluster.wait_serving(first)
    async with aiohttp.ClientSession() as session:
        await enqueue_batch(session, first, "b-limited", [f"j{i:03d}" for i in range(120)])
        await enqueue_batch(session, first, "a-other", [f"o{i:03d}" for i in range(20)])
    await downstream.wait_for(10)
    second = cluster.start()  # first holds both queues: it hands b-limited over
    await cluster.wait_serving(second)
    await wait_until(lambda: _owns(cluster, second.number, "b-limited"),
                     2 * LEASE_SECONDS + 1, "b-limited handed over to the second daemon")
    third = cluster.start()
    await cluster.wait_serving(third)
    await asyncio.sleep(0.5)
    assert await cluster.stop(second) == 0  # and over again
    await wait_until(lambda: _is(_archived(cluster.pg), 140), 60, "all jobs done")

    assert downstream.peak["b-limited"] <= 3, downstream.peak
    assert downstream.peak["b-limited"] == 3  # the limit was used, not just respected
    history = await _history(cluster.pg)
    assert all(outcome != "lost" for _, _, outcome in history), history
    assert len(downstream.launches) == 140  # no re-send


async def _is(value: asyncio.Future[int] | object, expected: int) -> bool:
    return await value == expected  # type: ignore[misc]


async def _archived(pg: str) -> int:
    conn = await asyncpg.connect(pg)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM archived_jobs"))
    finally:
        await conn.close()


async def _owns(cluster, number: int, queue: str) -> bool:  # type: ignore[no-untyped-def]
    return queue in (await cluster.leases()).get(number, set())

"""Wake-ups across daemons with LISTEN/NOTIFY: an enqueue received by a daemon that
does not own the queue reaches the downstream within milliseconds, though the
owner's tick interval is 5 s; with ``database.notify: false`` polling carries it."""

from __future__ import annotations

import statistics
import time

import aiohttp
import pytest

from tests.scale.cluster import Cluster, Downstream, enqueue, http_queue, wait_until

pytestmark = pytest.mark.slow

ROUNDS = 20


async def _latencies(cluster: Cluster, downstream: Downstream, rounds: int) -> list[float]:
    first = cluster.start()
    await cluster.wait_serving(first)
    await wait_until(lambda: _owns(cluster, first.number), 10, "the first daemon owns q")
    second = cluster.start()  # one queue: the second daemon never takes it
    await cluster.wait_serving(second)
    await wait_until(lambda: _is_live(cluster, 2), 10, "both daemons registered")
    latencies = []
    async with aiohttp.ClientSession() as session:
        for n in range(rounds):
            sent = time.monotonic()
            await enqueue(session, second, "q", f"j{n}")
            await downstream.wait_for(n + 1, within=15)
            latencies.append(downstream.launches[-1].at - sent)
    assert await _owns(cluster, first.number)
    return latencies


async def test_an_enqueue_at_another_daemon_wakes_the_owner(
        make_cluster, downstream: Downstream) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster([http_queue("q", downstream.url)], interval_seconds=5.0,
                           lease_seconds=30.0)
    downstream.cluster = cluster
    latencies = await _latencies(cluster, downstream, ROUNDS)
    assert statistics.median(latencies) < 0.1, latencies


async def test_without_notify_polling_launches_the_jobs(
        make_cluster, downstream: Downstream) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster([http_queue("q", downstream.url)], interval_seconds=0.5,
                           lease_seconds=30.0, notify=False)
    downstream.cluster = cluster
    latencies = await _latencies(cluster, downstream, 3)
    assert max(latencies) < 5, latencies


async def _owns(cluster: Cluster, number: int) -> bool:
    return "q" in (await cluster.leases()).get(number, set())


async def _is_live(cluster: Cluster, count: int) -> bool:
    import asyncpg

    conn = await asyncpg.connect(cluster.pg)
    try:
        live = await conn.fetchval("SELECT count(*) FROM daemons WHERE expires_at > now()")
    finally:
        await conn.close()
    return int(live) == count





async def test_a_daemon_alone_sends_no_wake_notify(
        make_cluster, downstream: Downstream) -> None:  # type: ignore[no-untyped-def]
    """NOTIFY is for the other daemons: alone, an enqueue costs no statement for it;
    once a second daemon is live, enqueues notify."""
    import asyncio

    import asyncpg

    from hipq.store.notify import CHANNEL, WAKE

    cluster = make_cluster([http_queue("q", downstream.url)], interval_seconds=5.0,
                           lease_seconds=30.0)
    downstream.cluster = cluster
    heard: list[str] = []
    listener = await asyncpg.connect(cluster.pg)
    await listener.add_listener(CHANNEL, lambda *args: heard.append(args[-1]))
    try:
        first = cluster.start()
        await cluster.wait_serving(first)
        async with aiohttp.ClientSession() as session:
            for n in range(5):
                await enqueue(session, first, "q", f"alone-{n}")
            await downstream.wait_for(5, within=15)
            await asyncio.sleep(0.5)
            assert WAKE not in heard, heard
            second = cluster.start()
            await cluster.wait_serving(second)
            await wait_until(lambda: _is_live(cluster, 2), 10, "both daemons registered")
            for n in range(40):  # the first daemon counts two from its next renewal
                await enqueue(session, first, "q", f"together-{n}")
                if WAKE in heard:
                    break
                await asyncio.sleep(0.5)
            assert WAKE in heard, "no wake NOTIFY with two daemons live"
    finally:
        await listener.close()

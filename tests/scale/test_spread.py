"""Fair spread of queue leases over live daemons (real processes, PostgreSQL)."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from tests.scale.cluster import wait_until
from tests.scale.conftest import LEASE_SECONDS

pytestmark = pytest.mark.slow

QUEUES = [{"id": f"q{i}", "attempts": 1} for i in range(9)]  # no target: never launches


async def test_three_daemons_share_nine_queues(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(QUEUES)
    daemons = [cluster.start() for _ in range(3)]
    for daemon in daemons:
        await cluster.wait_serving(daemon)
    started = time.monotonic()
    share = math.ceil(9 / 3)

    async def spread() -> bool:
        leases = await cluster.leases()
        return (sum(len(q) for q in leases.values()) == 9
                and all(len(leases.get(d.number, ())) == share for d in daemons))

    await wait_until(spread, 2 * LEASE_SECONDS + 2, "3 queues per daemon")
    assert time.monotonic() - started <= 2 * LEASE_SECONDS + 2
    # and it stays so: no daemon above its share + 1, every queue held
    for _ in range(10):
        leases = await cluster.leases()
        assert sum(len(q) for q in leases.values()) == 9, leases
        assert all(len(leases.get(d.number, ())) <= share + 1 for d in daemons), leases
        await asyncio.sleep(0.2)


async def test_a_joining_daemon_takes_its_share(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(QUEUES)
    first, second = cluster.start(), cluster.start()
    await cluster.wait_serving(first)
    await cluster.wait_serving(second)

    async def held_by(count: int, *numbers: int) -> bool:
        leases = await cluster.leases()
        return (sum(len(q) for q in leases.values()) == 9
                and all(len(leases.get(n, ())) >= count for n in numbers))

    await wait_until(lambda: held_by(4, first.number, second.number), 4 * LEASE_SECONDS,
                     "two daemons share the queues")
    third = cluster.start()
    await cluster.wait_serving(third)
    took = await wait_until(lambda: held_by(3, first.number, second.number, third.number),
                            2 * LEASE_SECONDS + 1, "the third daemon takes its share")
    assert took <= 2 * LEASE_SECONDS


async def test_sigterm_hands_the_queues_over_at_once(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(QUEUES)
    daemons = [cluster.start() for _ in range(3)]
    for daemon in daemons:
        await cluster.wait_serving(daemon)

    async def all_held(*numbers: int, share: int) -> bool:
        leases = await cluster.leases()
        return (sum(len(q) for q in leases.values()) == 9
                and all(len(leases.get(n, ())) == share for n in numbers))

    await wait_until(lambda: all_held(*(d.number for d in daemons), share=3),
                     3 * LEASE_SECONDS, "spread")
    assert await cluster.stop(daemons[0]) == 0
    rest = [d.number for d in daemons[1:]]
    took = await wait_until(lambda: _some(cluster, rest), 5, "the others take the queues")
    # the leases were released (not left to expire): taken well before lease_seconds
    assert took < LEASE_SECONDS, took


async def _some(cluster, numbers: list[int]) -> bool:  # type: ignore[no-untyped-def]
    leases = await cluster.leases()
    held = [len(leases.get(n, ())) for n in numbers]
    return sum(held) == 9 and max(held) <= 5

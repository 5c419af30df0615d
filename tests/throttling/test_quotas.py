"""Quotas (docs/throttling.md): each group holds at most floor(share x concurrency) weight units;
missing or unlisted values fall into the default group; nested field paths;
``lend_unused`` lends idle capacity and takes it back as jobs finish."""

from __future__ import annotations

import random

from hipq.bodies import EnqueueRequest
from hipq.jobs import Job
from tests.throttling._helpers import Harness, weight_by

SHARES = {"east": 0.4, "north": 0.3, "west": 0.3}


def _region(job: Job) -> str | None:
    value = job.data.get("region")
    return value if isinstance(value, str) else None


async def test_40_30_30_with_1000_uneven_jobs(h: Harness) -> None:
    """The example of docs/throttling.md: capacity 100, east 40% / north 30% / west 30%, 1,000 jobs
    (700 east first in order, then 200 north, 100 west)."""
    await h.create(concurrency=100, quotas={"field": "region", "shares": SHARES})
    regions = ["east"] * 700 + ["north"] * 200 + ["west"] * 100
    await h.enqueue_many([(f"j{i:04d}", EnqueueRequest(data={"region": r}))
                          for i, r in enumerate(regions)])
    rng = random.Random(7)
    caps = {"east": 40, "north": 30, "west": 30}
    for n in range(12):
        h.clock.advance(1)
        await h.tick()
        running = await h.running()
        used = weight_by(running, _region)
        for region, cap in caps.items():
            assert used.get(region, 0) <= cap, (n, region, used)
        if n == 0:  # north and west launch at once although every east job is earlier
            assert used == caps
        # a random part of the running jobs finishes
        await h.respond_many([job for job in running if rng.random() < 0.5])
    launched = {r: sum(1 for i in h.launched_ids() if regions[int(i[1:])] == r) for r in caps}
    assert launched["west"] == 100  # the small group ran through while east waited
    assert launched["north"] > 100, launched
    assert launched["east"] > 100, launched


async def test_weights_count_against_the_group(h: Harness) -> None:
    await h.create(concurrency=10, quotas={"field": "region", "shares": {"a": 0.5, "b": 0.5}})
    for i in range(4):
        await h.enqueue(f"a{i}", data={"region": "a"}, weight=2)
    await h.enqueue("b0", data={"region": "b"}, weight=3)
    await h.tick()
    running = await h.running()
    assert sorted(j.id for j in running) == ["a0", "a1", "b0"]  # a: 4 units of 5
    assert weight_by(running, _region) == {"a": 4, "b": 3}


async def test_missing_and_unlisted_values_go_to_the_default_group(h: Harness) -> None:
    """No ``default``: the default group gets what the listed shares leave (20%)."""
    await h.create(concurrency=10, quotas={"field": "region", "shares": {"a": 0.4, "b": 0.4}})
    items = [(f"x{i}", EnqueueRequest(data={})) for i in range(3)]
    items += [(f"y{i}", EnqueueRequest(data={"region": "mars"})) for i in range(3)]
    items += [(f"z{i}", EnqueueRequest(data={"region": {"nested": 1}})) for i in range(3)]
    items += [(f"a{i}", EnqueueRequest(data={"region": "a"})) for i in range(2)]
    await h.enqueue_many(items)
    await h.tick()
    running = sorted(j.id for j in await h.running())
    assert running == ["a0", "a1", "x0", "x1"]  # default group capped at 2 units
    await h.finish_running(["x0"])
    await h.tick()
    assert sorted(j.id for j in await h.running()) == ["a0", "a1", "x1", "x2"]


async def test_explicit_default_share(h: Harness) -> None:
    await h.create(concurrency=10, quotas={"field": "region", "shares": {"a": 0.5},
                                           "default": 0.3})
    await h.enqueue_many([(f"n{i}", EnqueueRequest(data={"other": i})) for i in range(6)])
    await h.tick()
    assert len(await h.running()) == 3


async def test_nested_field_path(h: Harness) -> None:
    await h.create(concurrency=4, quotas={"field": "customer.region",
                                          "shares": {"eu": 0.5, "us": 0.5}})
    items = [(f"eu{i}", EnqueueRequest(data={"customer": {"region": "eu"}})) for i in range(5)]
    items += [(f"us{i}", EnqueueRequest(data={"customer": {"region": "us"}})) for i in range(5)]
    items += [(f"flat{i}", EnqueueRequest(data={"region": "eu"})) for i in range(2)]
    await h.enqueue_many(items)
    await h.tick()
    running = sorted(j.id for j in await h.running())
    assert running == ["eu0", "eu1", "us0", "us1"]
    # the flat "region" is not the configured path: those jobs are in the default
    # group, which has no share left (0.5 + 0.5), so they wait
    for _ in range(6):
        await h.finish_running()
        h.clock.advance(1)
        await h.tick()
        assert not any(j.id.startswith("flat") for j in await h.running())


async def test_unused_quota_is_not_lent_by_default(h: Harness) -> None:
    await h.create(concurrency=10, quotas={"field": "region", "shares": {"a": 0.3, "b": 0.7}})
    await h.enqueue_many([(f"a{i}", EnqueueRequest(data={"region": "a"})) for i in range(8)])
    for _ in range(3):
        h.clock.advance(1)
        await h.tick()
        assert len(await h.running()) == 3  # b's 7 idle units stay idle


async def test_lend_unused_borrows_idle_capacity_and_gives_it_back(h: Harness) -> None:
    await h.create(concurrency=10, quotas={"field": "region", "shares": {"a": 0.3, "b": 0.7},
                                           "lend_unused": True})
    await h.enqueue_many([(f"a{i:02d}", EnqueueRequest(data={"region": "a"}))
                          for i in range(20)])
    await h.tick()
    assert len(await h.running()) == 10  # a borrows b's idle 7 units

    # b's jobs arrive: nothing is pre-empted, but as a's jobs finish b takes back
    # its share and a falls back to its own 3 units
    await h.enqueue_many([(f"b{i:02d}", EnqueueRequest(data={"region": "b"}))
                          for i in range(20)])
    h.clock.advance(1)
    await h.tick()
    used = weight_by(await h.running(), _region)
    assert used == {"a": 10}
    a_running = [j for j in await h.running() if _region(j) == "a"]
    for job in a_running[:4]:
        await h.respond(job)
    h.clock.advance(1)
    await h.tick()
    assert weight_by(await h.running(), _region) == {"a": 6, "b": 4}
    for job in await h.running():
        if _region(job) == "a":
            await h.respond(job)
    h.clock.advance(1)
    await h.tick()
    assert weight_by(await h.running(), _region) == {"a": 3, "b": 7}
    # a borrows again once b has nothing left to run
    for _ in range(10):
        await h.finish_running()
        h.clock.advance(1)
        await h.tick()
    assert len(h.launched_ids()) == 40


async def test_quota_group_does_not_block_other_groups(h: Harness) -> None:
    """A full group's jobs first in order do not hold back a group with room."""
    await h.create(concurrency=4, quotas={"field": "region", "shares": {"a": 0.5, "b": 0.5}})
    await h.enqueue_many([(f"a{i}", EnqueueRequest(data={"region": "a"})) for i in range(50)])
    await h.enqueue("b0", data={"region": "b"})
    await h.tick()
    assert sorted(j.id for j in await h.running()) == ["a0", "a1", "b0"]

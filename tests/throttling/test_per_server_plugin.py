"""The example plugin ``plugins/per_server.py``: at most N running jobs per
``data.server``, composed of the built-in parts (capacity, ordering keys, windows)."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime

import pytest

from hipq.bodies import EnqueueRequest
from hipq.errors import ValidationError
from tests.throttling._helpers import Harness

PER_SERVER = {"plugin": "hipq.contrib.per_server:PerServer", "options": {"limit": 2}}


async def test_at_most_n_per_server_and_the_queue_capacity(h: Harness) -> None:
    await h.create(concurrency=5, throttler=PER_SERVER)
    items = [(f"s1-{i}", EnqueueRequest(data={"server": "s1"})) for i in range(6)]
    items += [(f"s2-{i}", EnqueueRequest(data={"server": "s2"}, weight=2)) for i in range(3)]
    items += [(f"s3-{i}", EnqueueRequest(data={"server": "s3"})) for i in range(4)]
    items += [(f"none-{i}", EnqueueRequest(data={})) for i in range(3)]
    await h.enqueue_many(items)
    rng = random.Random(3)
    for _ in range(25):
        await h.tick()
        running = await h.running()
        per_server = Counter(j.data.get("server", "?") for j in running)
        assert max(per_server.values(), default=0) <= 2, per_server
        assert sum(j.weight for j in running) <= 5
        await h.respond_many([j for j in running if rng.random() < 0.4])
        h.clock.advance(1)
    assert sorted(h.launched_ids()) == sorted(i for i, _ in items)  # nobody starves


async def test_first_tick_takes_two_per_server(h: Harness) -> None:
    await h.create(concurrency=10, throttler=PER_SERVER)
    await h.enqueue_many([(f"a{i}", EnqueueRequest(data={"server": "a"})) for i in range(4)]
                         + [(f"b{i}", EnqueueRequest(data={"server": "b"})) for i in range(4)])
    assert sorted(j.id for j in await h.tick()) == ["a0", "a1", "b0", "b1"]


async def test_ordering_keys_and_windows_still_hold(h: Harness) -> None:
    h.clock.set(datetime(2026, 1, 5, 10, 30, tzinfo=UTC))
    await h.create(concurrency=10, throttler={"plugin": "hipq.contrib.per_server:PerServer",
                                              "options": {"limit": 3}},
                   time_windows=[{"start": "10:00", "end": "11:00"}])
    await h.enqueue("k1", data={"server": "a"}, ordering_key="k")
    await h.enqueue("k2", data={"server": "a"}, ordering_key="k")
    await h.enqueue("own", data={"server": "b"}, time_windows=[{"start": "12:00",
                                                                "end": "13:00"}])
    assert sorted(j.id for j in await h.tick()) == ["k1"]
    h.clock.set(datetime(2026, 1, 5, 11, 30, tzinfo=UTC))  # the queue's window closed
    await h.finish_running()
    await h.tick()
    await h.tick()
    assert h.launched_ids() == ["k1"]  # k2 is rescheduled, not launched outside
    k2 = await h.job("k2")
    assert k2.status == "queued"
    assert k2.run_at == datetime(2026, 1, 6, 10, tzinfo=UTC)
    h.clock.set(datetime(2026, 1, 5, 12, tzinfo=UTC))
    assert [j.id for j in await h.tick()] == ["own"]


async def test_bad_options_are_rejected_at_queue_creation(h: Harness) -> None:
    with pytest.raises(ValidationError, match="limit"):
        await h.create(throttler={"plugin": "hipq.contrib.per_server:PerServer",
                                  "options": {"limit": 0}})

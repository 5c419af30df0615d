"""What the owner of a partner's queues writes of the partner at its ticks' end
(hipq.engine.seen; docs/http-api.md, "Partners"): its snapshot at most once a
second, with the whole partner's buckets, in flight, totals and learned rate, and
what each second added to the current minute; nothing for a daemon without
partners or for partners it holds no queue of."""

from __future__ import annotations

from datetime import timedelta

from hipq.config import PartnerConfig
from hipq.engine import Reconciler
from hipq.engine.seen import bucket_name, jsonable, normal_bucket, whole_buckets
from hipq.service import Hipq
from hipq.store import Store
from hipq.store.seen import minute_of
from hipq.targets import Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, queue, respond, tick
from tests.engine.test_partner_budgets import engine, running, two_queues

LIMITS = [{"requests": 10, "per_seconds": 1}, {"cost": 1000, "per_seconds": 60}]


async def test_the_owner_writes_each_partner_once_a_second(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = engine(store, clock, target, concurrency=50, limits=LIMITS,
                        cost={"estimate": "tokens"})
    await two_queues(hipq, 10, tokens=30)
    start = clock.now()
    await tick(reconciler)  # 10 launches: the second's request bucket is full
    seen = (await store.partner_seen_list())["llm"]
    assert (seen.owner, seen.updated_at) == ("o1", start)
    snap = seen.snapshot
    assert (snap["in_flight"], snap["accepted_total"], snap["refused_total"]) == (10, 10, 0)
    assert snap["learned_rate"] is None
    assert [(b["unit"], b["limit"], b["per_seconds"], b["used"], b["source"])
            for b in snap["buckets"]] == [("requests", 10, 1, 10, "configured"),
                                          ("cost", 1000, 60, 300, "configured")]
    assert snap["buckets"][0]["room_at"] == jsonable(start + timedelta(seconds=1))
    assert [bucket_name(b) for b in snap["buckets"]] == ["requests_per_1s", "cost_per_60s"]

    clock.advance(0.5)
    for held in running(reconciler)[:4]:
        await respond(hipq, held.id, held.queue, status="succeeded")
    await tick(reconciler)  # within the second: not written again
    assert (await store.partner_seen_list())["llm"].updated_at == start

    clock.advance(0.6)
    await tick(reconciler)  # 10 more launched; written
    seen = (await store.partner_seen_list())["llm"]
    assert seen.updated_at == clock.now()
    assert (seen.snapshot["in_flight"], seen.snapshot["accepted_total"]) == (16, 20)

    minutes = await store.partner_minutes_list(partner="llm", since=minute_of(start))
    assert sum(m.accepted for m in minutes) == 20  # each launch counted once
    assert max(m.in_flight_max for m in minutes) == 16
    assert all(m.buckets[0]["unit"] == "requests" for m in minutes)


async def test_refusals_count_in_the_minute(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    from tests.engine.test_partner_budgets import refuse

    reconciler = engine(store, clock, target)
    await two_queues(hipq, 20)
    target.behaviour = refuse()
    await tick(reconciler)
    clock.advance(1.5)
    await tick(reconciler)  # the refusals heard: the rate learned
    clock.advance(1.5)
    await tick(reconciler)
    snap = (await store.partner_seen_list())["llm"].snapshot
    assert snap["refused_total"] > 0
    assert snap["learned_rate"] is not None
    minutes = await store.partner_minutes_list(partner="llm",
                                               since=clock.now() - timedelta(hours=1))
    assert sum(m.refused for m in minutes) == snap["refused_total"]
    assert minutes[-1].learned_rate == snap["learned_rate"]


async def test_an_hour_later_the_old_minutes_are_gone(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = engine(store, clock, target, limits=LIMITS)
    await two_queues(hipq, 3)
    await tick(reconciler)
    first = minute_of(clock.now())
    clock.advance(3600 + 60)
    await enqueue(hipq, "late", "summaries")
    await tick(reconciler)
    minutes = await store.partner_minutes_list(partner="llm", since=first - timedelta(hours=2))
    assert [m.minute for m in minutes] == [minute_of(clock.now())]


async def test_nothing_is_written_without_partners(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    plain = Reconciler(store, clock=clock, owner="o1", targets=Targets(memory={"t": target}))
    await hipq.create_queue(queue("q", concurrency=5))
    await enqueue(hipq, "a", "q")
    await tick(plain)
    assert await store.partner_seen_list() == {}
    # a daemon that declares the partner but holds none of its queues writes nothing
    other = engine(store, clock, target, limits=LIMITS)
    await tick(other)
    assert await store.partner_seen_list() == {}


def test_a_bucket_the_partner_reported_is_kept_as_it_said() -> None:
    """Its window may be unknown (then its name is ``reported_`` and the partner's,
    bounded), its limit too (then its use is unknown); reset since: whole again."""
    said = {"unit": "cost", "name": "Input-Tokens \"x\"" * 5, "limit": 1000.0,
            "per_seconds": None, "remaining": 250.0, "room_at": "2026-01-05T12:00:00Z",
            "resets_at": "2026-01-05T12:00:10Z", "source": "partner"}
    bucket = normal_bucket(said)
    assert bucket["name"].startswith("reported_input_tokens_x_")
    assert len(bucket["name"]) == 40
    assert (bucket["limit"], bucket["used"], bucket["remaining"]) == (1000.0, 750.0, 250.0)
    assert normal_bucket({**said, "remaining": None})["used"] == 0.0
    unknown = normal_bucket({**said, "limit": None, "per_seconds": 60})
    assert (unknown["name"], unknown["used"], unknown["remaining"]) == ("cost_per_60s", None,
                                                                        250.0)


def test_with_by_each_bucket_is_the_tightest_keys() -> None:
    spec = PartnerConfig.model_validate({"id": "llm", "by": "api_key", "limits": [
        {"requests": 10, "per_seconds": 1}]}).to_spec()
    key = {"unit": "requests", "limit": 10.0, "per_seconds": 1.0, "room_at": None,
           "source": "configured"}
    snapshot = {"keys": [{"key": "a", "buckets": [{**key, "used": 3.0}]},
                         {"key": "b", "buckets": [{**key, "used": 8.0}]}]}
    assert [(b["name"], b["used"], b["remaining"]) for b in whole_buckets(spec, snapshot)] == [
        ("requests_per_1s", 8.0, 2.0)]
    assert [b["used"] for b in whole_buckets(spec, {"keys": []})] == [0.0]

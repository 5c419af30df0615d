"""Partners (docs/throttling.md, "Partners") in the engine, with the clock moved by
hand: one budget for every queue that names a partner, in requests and cost, per
key with ``by``; the estimated cost reserved at launch and replaced by the actual
one; a refusal of any of its queues heard by all of them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from hipq.config import PartnerConfig
from hipq.engine import Reconciler
from hipq.errors import ValidationError
from hipq.jobs import Job
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Accepted, Completed, LaunchOutcome, Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, queue, respond, tick

QUEUES = ("summaries", "embeddings")


def engine(store: Store, clock: FakeClock, target: MemoryTarget,
           **partner: Any) -> Reconciler:
    spec = PartnerConfig.model_validate({"id": "llm", **partner}).to_spec()
    return Reconciler(store, clock=clock, owner="o1", targets=Targets(memory={"t": target}),
                      partners={"llm": spec})


async def two_queues(hipq: Hipq, jobs: int, **data: Any) -> None:
    for name in QUEUES:
        await hipq.create_queue(queue(name, concurrency=100, partner="llm"))
    for i in range(jobs):
        for name in QUEUES:
            await enqueue(hipq, f"{name[0]}{i:03d}", name, data=dict(data))


def running(reconciler: Reconciler) -> list[Any]:
    return [h for h in reconciler.batch.values() if h.outcome is None]


async def test_two_queues_share_the_partners_request_buckets(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = engine(store, clock, target, limits=[{"requests": 10, "per_seconds": 1},
                                                      {"requests": 25, "per_seconds": 60}])
    await two_queues(hipq, 30)
    first = await tick(reconciler)
    assert first.launched == 10  # both queues together, not 10 each
    served_first = {j.queue for j in target.launched}
    assert len(served_first) == 1
    assert (await tick(reconciler)).launched == 0  # the same second: no room
    assert first.wake_at is not None or (await tick(reconciler)).wake_at is not None
    clock.advance(1)
    assert (await tick(reconciler)).launched == 10
    # the queue the partner served longest ago goes first: they take turns
    assert {j.queue for j in target.launched[10:]} == set(QUEUES) - served_first
    clock.advance(1)
    assert (await tick(reconciler)).launched == 5  # the minute's bucket: 25 in all
    held = (await store.queue_state_list(queues=list(QUEUES)))
    assert sum((s.held or {}).get("partner", 0) for s in held.values()) > 0


async def test_the_partners_concurrency_counts_every_queue(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = engine(store, clock, target, concurrency=4)
    await two_queues(hipq, 10)
    assert (await tick(reconciler)).launched == 4
    assert (await tick(reconciler)).launched == 0
    done = running(reconciler)[:3]
    for held in done:
        await respond(hipq, held.id, held.queue, status="succeeded")
    await tick(reconciler)  # the ends free three slots of the partner
    assert len(running(reconciler)) == 4


async def test_the_estimated_cost_is_reserved_then_the_actual_one_counts(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = engine(store, clock, target,
                        limits=[{"cost": 100, "per_seconds": 60}],
                        cost={"estimate": "max_tokens", "default": 1})
    await two_queues(hipq, 5, max_tokens=40)
    assert (await tick(reconciler)).launched == 2  # 80 of 100 reserved
    first = running(reconciler)[0]
    # the try used 10, not 40: 30 back, so 100 - 10 - 40 = 50 leaves room for one more
    await respond(hipq, first.id, first.queue, status="succeeded",
                  result={"usage": {"cost": 10}})
    assert (await tick(reconciler)).launched == 1
    assert (await tick(reconciler)).launched == 0
    second = next(h for h in running(reconciler) if h.id != first.id)
    # one that used more takes it: 10 + 90 + 40 = 140 over: nothing more this minute
    await respond(hipq, second.id, second.queue, status="succeeded",
                  result={"usage": {"cost": 90}})
    assert (await tick(reconciler)).launched == 0
    clock.advance(60)
    assert (await tick(reconciler)).launched == 2


async def test_each_key_has_buckets_of_its_own(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = engine(store, clock, target, by="api_key",
                        limits=[{"requests": 3, "per_seconds": 60}])
    for name in QUEUES:
        await hipq.create_queue(queue(name, concurrency=100, partner="llm"))
    for i in range(10):
        await enqueue(hipq, f"a{i}", "summaries", data={"api_key": "A"})
    for i in range(2):
        await enqueue(hipq, f"b{i}", "embeddings", data={"api_key": "B"})
        await enqueue(hipq, f"c{i}", "summaries", data={"api_key": "B"})
    await tick(reconciler)
    by_key: dict[str, int] = {}
    for job in target.launched:
        key = job.data["api_key"]
        by_key[key] = by_key.get(key, 0) + 1
    assert by_key == {"A": 3, "B": 3}  # A's backlog takes nothing of B's budget


def refuse(after: Any = None) -> Any:
    def answer(j: Job) -> LaunchOutcome:
        if j.queue != "summaries":
            return Accepted()
        error: dict[str, Any] = {"detail": "HTTP 429 from http://partner", "status": 429}
        if after is not None:
            error["retry_after"] = after
        return Completed(status="throttled", kind="throttled", error=error)
    return answer


async def test_a_refusal_in_one_queue_pauses_the_partner_for_all(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = engine(store, clock, target)
    await two_queues(hipq, 3)
    target.behaviour = refuse(after=30)
    await tick(reconciler)  # summaries refused with a time; embeddings accepted
    await tick(reconciler)
    paused = {b.queue for b in await store.backoff_list(queues=list(QUEUES))}
    assert paused == set(QUEUES)
    for name in QUEUES:
        await enqueue(hipq, f"{name}-late", name)
    assert (await tick(reconciler)).launched == 0
    clock.advance(30)
    target.behaviour = None
    assert (await tick(reconciler)).launched >= 2


async def test_a_bare_refusal_in_one_queue_slows_the_partner_for_all(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = engine(store, clock, target)
    await two_queues(hipq, 100)
    target.behaviour = refuse()
    assert (await tick(reconciler)).launched == 200  # nothing learned yet
    clock.advance(0.05)
    await tick(reconciler)  # summaries' refusals: the partner's rate is learned
    rate = reconciler.budgets.learned("llm", clock.now())
    assert rate is not None
    assert await store.backoff_list(queues=list(QUEUES)) == []  # no pause
    target.behaviour = None
    for i in range(100, 200):
        await enqueue(hipq, f"e{i:03d}", "embeddings")
    launched = 0
    for _ in range(20):
        clock.advance(0.05)
        launched += (await tick(reconciler)).launched
    # both queues together within the partner's learned pace over one second
    assert launched <= rate * 1.5 + 10
    state = (await store.queue_state_list(queues=["summaries"]))["summaries"]
    assert state.learned_rate is not None  # stored with the queue that heard it


async def test_the_partners_back_off_governs_its_queues(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = engine(store, clock, target,
                        backoff={"learn": False, "initial_seconds": 7, "max_seconds": 60})
    await two_queues(hipq, 1)
    target.behaviour = refuse()
    await tick(reconciler)
    await tick(reconciler)
    pauses = await store.backoff_list(queues=["summaries"])
    assert [p.until for p in pauses] == [clock.now() + timedelta(seconds=7)]


async def test_a_queue_may_name_only_a_declared_partner(store: Store,
                                                        clock: FakeClock) -> None:
    service = Hipq(store, clock=clock, partners=["llm"])
    await service.create_queue(queue("ok", partner="llm"))
    with pytest.raises(ValidationError, match="partner 'nope' is not declared"):
        await service.create_queue(queue("bad", partner="nope"))
    assert await store.queue_get("bad") is None


async def test_the_owner_describes_each_partner(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = engine(store, clock, target, concurrency=50,
                        limits=[{"requests": 10, "per_seconds": 1},
                                {"cost": 1000, "per_seconds": 60}],
                        cost={"estimate": "tokens"})
    await two_queues(hipq, 10, tokens=30)
    await tick(reconciler)
    seen = reconciler.budgets.snapshot("llm", clock.now())
    whole = seen["whole"]
    assert (seen["concurrency"], whole["in_flight"], whole["accepted_total"]) == (50, 10, 10)
    assert [(b["unit"], b["limit"], b["used"]) for b in whole["buckets"]] == [
        ("requests", 10, 10), ("cost", 1000, 300)]
    assert whole["buckets"][0]["room_at"] == clock.now() + timedelta(seconds=1)
    assert seen["keys"] == []
    assert seen["key_count"] == 0


def reporting(*headers: tuple[str, str]) -> Any:
    """A behaviour: every launch accepted, the answer carrying these headers."""
    def answer(j: Job) -> LaunchOutcome:
        return Accepted(budget=tuple(headers))
    return answer


async def test_a_queue_of_its_own_obeys_the_budget_its_partner_reports(
        hipq: Hipq, reconciler: Reconciler, store: Store, clock: FakeClock,
        target: MemoryTarget) -> None:
    await hipq.create_queue(queue("q", concurrency=100))
    for i in range(30):
        await enqueue(hipq, f"j{i:02d}")
    target.behaviour = reporting(("x-ratelimit-limit", "100"), ("x-ratelimit-remaining", "3"),
                                 ("x-ratelimit-reset", "10"))
    assert (await tick(reconciler)).launched == 30  # nothing reported before the answers
    for held in running(reconciler):
        await respond(hipq, held.id, "q", status="succeeded")
    for i in range(30, 60):
        await enqueue(hipq, f"j{i:02d}")
    await tick(reconciler)  # the answers said: 3 left until 10 s from now
    launched = len(target.launched) - 30
    assert launched <= 3
    for _ in range(5):
        clock.advance(1)
        await tick(reconciler)
    assert len(target.launched) - 30 <= 3  # not one more before the reset
    clock.advance(5)
    assert (await tick(reconciler)).launched > 3


async def test_a_partner_reporting_nothing_left_gets_nothing_before_its_reset(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    reconciler = engine(store, clock, target, cost={"estimate": "max_tokens"})
    await two_queues(hipq, 1, max_tokens=100)
    target.behaviour = reporting(("x-ratelimit-limit-tokens", "90000"),
                                 ("x-ratelimit-remaining-tokens", "0"),
                                 ("x-ratelimit-reset-tokens", "6m0s"),
                                 ("x-ratelimit-limit-requests", "500"),
                                 ("x-ratelimit-remaining-requests", "499"),
                                 ("x-ratelimit-reset-requests", "120ms"))
    assert (await tick(reconciler)).launched == 2
    for name in QUEUES:
        await enqueue(hipq, f"{name}-more", name, data={"max_tokens": 100})
    await tick(reconciler)  # OpenAI's answer: no tokens left, full again in 6 minutes
    assert len(target.launched) == 2
    # a token bucket: 90,000 refill linearly over 360 s, 250 a second; 100 take 0.4 s
    clock.advance(0.3)
    await tick(reconciler)
    assert len(target.launched) == 2
    clock.advance(0.15)
    await tick(reconciler)
    assert len(target.launched) == 3
    seen = reconciler.budgets.snapshot("llm", clock.now())
    assert {b["name"] for b in seen["whole"]["buckets"] if b["source"] == "partner"} == {
        "requests", "tokens"}


@pytest.mark.parametrize("headers", [
    (("ratelimit", "limit=100, remaining=0, reset=30"),),
    (("x-ratelimit-limit", "100"), ("x-ratelimit-remaining", "0"),
     ("x-ratelimit-reset", "30")),
])  # OpenAI's and Anthropic's are token buckets: they refill until the reset (above)
async def test_nothing_left_in_a_window_means_nothing_before_its_reset(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget,
        headers: tuple[tuple[str, str], ...]) -> None:
    reconciler = engine(store, clock, target)
    await two_queues(hipq, 1)
    target.behaviour = reporting(*headers)
    assert (await tick(reconciler)).launched == 2
    for name in QUEUES:
        await enqueue(hipq, f"{name}-more", name)
    for _ in range(29):
        await tick(reconciler)
        assert len(target.launched) == 2
        clock.advance(1)
    clock.advance(1)
    await tick(reconciler)
    assert len(target.launched) == 4


async def test_a_partners_queues_have_one_owner_and_move_together(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    """Two daemons, a partner's two queues and two queues of their own: the partner's
    queues are leased by one daemon; handed over, they move together and the next
    owner's buckets start from what the first one launched (no bucket is exceeded as
    the partner counts it: 10 a minute across both daemons)."""
    partner = {"limits": [{"requests": 10, "per_seconds": 60}]}
    first, second = MemoryTarget(), MemoryTarget()
    a = engine(store, clock, first, **partner)
    a.leases.owner = a.owner = "o1"
    b = Reconciler(store, clock=clock, owner="o2", targets=Targets(memory={"t": second}),
                   partners=dict(a.budgets.partners))
    await two_queues(hipq, 30)
    for name in ("alone-1", "alone-2"):
        await hipq.create_queue(queue(name, concurrency=5))
    await tick(a)
    await tick(b)
    clock.advance(2)
    await tick(a)
    await tick(b)
    holders = [r for r in (a, b) if set(QUEUES) & r.held]
    assert len(holders) == 1
    assert set(QUEUES) <= holders[0].held  # both, never one each
    launched = len([j for j in first.launched + second.launched if j.queue in QUEUES])
    assert launched == 10
    owner = holders[0]
    other = b if owner is a else a
    owner.leases.releasing |= set(QUEUES) & owner.leases.held  # a handover
    owner.leases.held -= set(QUEUES)
    await tick(owner)  # written back, released
    other.leases.force = True  # a rebalance now (else at its next renewal)
    await tick(other)
    assert set(QUEUES) <= other.held
    launched = len([j for j in first.launched + second.launched if j.queue in QUEUES])
    assert launched == 10  # the same minute: the next owner launches nothing more
    clock.advance(60)
    await tick(other)
    launched = len([j for j in first.launched + second.launched if j.queue in QUEUES])
    assert launched == 20


def test_keys_are_bounded_and_the_idle_ones_used_longest_ago_go_first() -> None:
    from hipq.engine import budgets as budgets_module

    partner = PartnerConfig.model_validate({"id": "llm", "by": "k"}).to_spec()
    book = budgets_module.Budgets({"llm": partner})
    start = FakeClock().now()
    for n in range(budgets_module.MAX_KEYS + 50):
        book.account(partner, f"key{n}").last_used = start + timedelta(seconds=n)
    kept = {key for key, _ in book.accounts("llm")}
    assert len(kept) <= budgets_module.MAX_KEYS
    assert "key0" not in kept  # used longest ago
    assert f"key{budgets_module.MAX_KEYS + 49}" in kept

"""Who may pause a scope, and for how long (issue 46, finding 3; docs/throttling.md,
"Who may pause, and for how long"), in the engine, on each database, the clock moved
by hand.

Only the partner pauses: the target's own answer, a response on the try's signed
callback URL, a Kafka response matched to the running try. A ``throttled`` status a
producer sends with its bearer token (``POST /v1/jobs/{queue}/{id}``) gives that one
try back and pauses nothing, in queue or group scope. A time the partner gives is
capped at ``backoff.max_partner_seconds`` (default 3600). On SQLite, PostgreSQL and
the store in memory."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from hipq.bodies import ResponseRequest
from hipq.engine import Reconciler
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Completed
from hipq.testing import FakeClock, MemoryTarget
from tests.conftest import BACKENDS, MEMORY
from tests.engine._helpers import enqueue, history, job, queue, tick
from tests.engine.test_partner import pauses, throttle

# the inbox keeps who answered (its source, a signed callback's token) and the store
# keeps the pauses: on each database as well as on the store in memory
pytestmark = pytest.mark.parametrize("backend", [MEMORY, *BACKENDS], indirect=True)

DAY = 86400


async def _status(hipq: Hipq, job_id: str, **fields: Any) -> None:
    """The producer's status route, as ``POST /v1/jobs/q/{id}`` calls it."""
    running = await job(hipq, job_id)
    await hipq.report_status("q", job_id, ResponseRequest(attempt=running.attempt, **fields))


async def _signed(hipq: Hipq, job_id: str, **fields: Any) -> None:
    """A response on the try's signed callback URL, as ``POST /v1/responses/{key}``
    calls it once the signature checked."""
    running = await job(hipq, job_id)
    assert running.correlation_key is not None
    await hipq.report_callback(running.correlation_key, running.attempt, running.token,
                               ResponseRequest(**fields))


async def _kafka(hipq: Hipq, job_id: str, **fields: Any) -> None:
    running = await job(hipq, job_id)
    assert running.correlation_key is not None
    await hipq.report_response(running.correlation_key, ResponseRequest(**fields),
                               source="kafka")


async def test_a_producers_throttled_status_pauses_no_queue(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, store: Store) -> None:
    """The finding as reported: a day's ``retry_after_seconds`` on the producer's own
    running job paused the queue for every tenant. Now: that try is given back (its
    attempt not spent, at most ``max_partner_seconds`` away), nothing is paused, and
    another producer's job launches at once."""
    await hipq.create_queue(queue(concurrency=10, adaptive={"min": 1}))
    await enqueue(hipq, "mine")
    assert (await tick(reconciler)).launched == 1
    await _status(hipq, "mine", status="throttled", retry_after_seconds=DAY)
    await tick(reconciler)
    given_back = await job(hipq, "mine")
    assert (given_back.status, given_back.attempt) == (JobState.QUEUED, 0)
    assert clock.now() < given_back.run_at <= clock.now() + timedelta(seconds=3600)
    assert [t.outcome for t in await history(hipq, "mine")] == ["throttled"]
    assert await pauses(store) == {}
    assert reconciler.partner.queue_pause("q", clock.now()) is None
    assert reconciler.partner.effective(
        (await hipq.get_queue("q")).spec) == 10  # no decrease either
    await enqueue(hipq, "theirs")
    assert (await tick(reconciler)).launched == 1
    assert (await job(hipq, "theirs")).status is JobState.RUNNING


async def test_a_producers_throttled_status_pauses_no_group(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, store: Store) -> None:
    """In group scope the producer picks the group value: a job of its own carrying a
    victim's value, throttled by its status call, pauses the victim's group no longer."""
    await hipq.create_queue(queue(backoff={"scope": "group", "field": "tenant"}))
    await enqueue(hipq, "forged", data={"tenant": "victim"})
    await tick(reconciler)
    await _status(hipq, "forged", status="throttled", retry_after_seconds=DAY)
    await tick(reconciler)
    assert (await job(hipq, "forged")).attempt == 0
    assert await pauses(store) == {}
    await enqueue(hipq, "v1", data={"tenant": "victim"})
    assert (await tick(reconciler)).launched == 1
    assert (await job(hipq, "v1")).status is JobState.RUNNING


async def test_a_producers_failed_status_of_kind_throttled_pauses_nothing(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, store: Store) -> None:
    """The same through the back door: ``failed`` with ``error.kind: throttled`` (a
    kind the engine reads as a throttled try) and a ``retry_after`` of its own."""
    await hipq.create_queue(queue(backoff={"scope": "group", "field": "tenant"}))
    await enqueue(hipq, "forged", data={"tenant": "victim"})
    await tick(reconciler)
    await _status(hipq, "forged", status="failed",
                  error={"kind": "throttled", "retry_after": DAY, "from_partner": True})
    await tick(reconciler)
    assert (await job(hipq, "forged")).attempt == 0
    assert await pauses(store) == {}
    await enqueue(hipq, "v1", data={"tenant": "victim"})
    assert (await tick(reconciler)).launched == 1


async def test_a_producers_throttled_status_without_a_time_waits_the_initial_back_off(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, store: Store) -> None:
    """No hot loop: the try comes back after ``backoff.initial_seconds``, doubling per
    throttled try of the job in a row; past ``max_throttled`` it is a failed try."""
    await hipq.create_queue(queue(attempts=1, backoff={"initial_seconds": 2,
                                                       "max_throttled": 2}))
    await enqueue(hipq, "a")
    waits = []
    for _ in range(2):
        await tick(reconciler)
        await _status(hipq, "a", status="throttled")
        await tick(reconciler)
        given_back = await job(hipq, "a")
        assert given_back.status is JobState.QUEUED
        waits.append((given_back.run_at - clock.now()).total_seconds())
        clock.set(given_back.run_at)
    assert waits == [2, 4]
    await tick(reconciler)
    await _status(hipq, "a", status="throttled")
    await tick(reconciler)
    assert (await job(hipq, "a")).status is JobState.FAILED
    assert await pauses(store) == {}


async def test_a_signed_callbacks_throttled_answer_still_pauses(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, store: Store) -> None:
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    await tick(reconciler)
    await _signed(hipq, "a", status="throttled", retry_after_seconds=30)
    await tick(reconciler)
    stored = await job(hipq, "a")
    assert (stored.status, stored.attempt) == (JobState.QUEUED, 0)
    assert (await pauses(store))[None].until == clock.now() + timedelta(seconds=30)
    await enqueue(hipq, "b")
    assert (await tick(reconciler)).launched == 0


async def test_a_kafka_throttled_answer_still_pauses_its_group(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, store: Store) -> None:
    await hipq.create_queue(queue(backoff={"scope": "group", "field": "tenant"}))
    await enqueue(hipq, "a", data={"tenant": "t1"})
    await tick(reconciler)
    await _kafka(hipq, "a", status="throttled", retry_after_seconds=20)
    await tick(reconciler)
    assert (await pauses(store))["t1"].until == clock.now() + timedelta(seconds=20)


async def test_a_partners_day_is_capped_at_max_partner_seconds(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    """From the target's answer, a signed callback and Kafka alike: at most an hour
    (the default), where a day (the old cap) or more was asked."""
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    target.behaviour = throttle(999999999)
    await tick(reconciler)
    await tick(reconciler)
    assert (await pauses(store))[None].until == clock.now() + timedelta(seconds=3600)
    assert (await job(hipq, "a")).run_at == clock.now() + timedelta(seconds=3600)
    clock.advance(3600)
    target.behaviour = None
    for how in (_signed, _kafka):
        await tick(reconciler)
        await how(hipq, "a", status="throttled", retry_after_seconds=999999999)
        await tick(reconciler)
        assert (await pauses(store))[None].until == clock.now() + timedelta(seconds=3600)
        clock.advance(3600)


async def test_a_configured_max_partner_seconds_is_honoured(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue("long", backoff={"max_partner_seconds": 2 * DAY}))
    await hipq.create_queue(queue("short", backoff={"max_partner_seconds": 10}))
    await enqueue(hipq, "a", "long")
    await enqueue(hipq, "b", "short")
    target.behaviour = throttle(1.5 * DAY)
    await tick(reconciler)
    await tick(reconciler)
    assert (await pauses(store, "long"))[None].until == clock.now() + timedelta(days=1.5)
    assert (await pauses(store, "short"))[None].until == clock.now() + timedelta(seconds=10)


async def test_a_spent_budget_is_capped_too(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget, clock: FakeClock,
        store: Store) -> None:
    await hipq.create_queue(queue(backoff={"max_partner_seconds": 60}))
    await enqueue(hipq, "a")
    target.behaviour = lambda j: Completed(status="succeeded", spent=300 * DAY)
    await tick(reconciler)
    await tick(reconciler)
    assert (await pauses(store))[None].until == clock.now() + timedelta(seconds=60)


async def test_a_throttled_answer_on_the_templated_inbox_pauses_nothing(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, store: Store) -> None:
    """``POST /v1/inbox/{queue}`` is a producer-token route too: no signature ties
    its answer to the try, so its word gives the try back and pauses nothing."""
    await hipq.create_queue(queue(correlation={"request": "{data.order}",
                                               "response": "{body.order}"}))
    await enqueue(hipq, "a", data={"order": "o1"})
    await tick(reconciler)
    await hipq.report_by_template("q", {"body": {"order": "o1"}, "query": {}, "path": {}},
                                  ResponseRequest(status="throttled", retry_after_seconds=DAY))
    await tick(reconciler)
    stored = await job(hipq, "a")
    assert (stored.status, stored.attempt) == (JobState.QUEUED, 0)
    assert await pauses(store) == {}


async def test_a_producers_failed_status_of_kind_timeout_leaves_the_adaptive_limit(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    """A timed-out try lowers the queue's adaptive limit for every tenant; a producer
    saying ``failed`` with ``error.kind: timeout`` is not one (hipq's own deadline,
    or the target's, is)."""
    await hipq.create_queue(queue(concurrency=10, adaptive={"min": 1}, attempts=5,
                                  timeout_seconds=30))
    spec = (await hipq.get_queue("q")).spec
    await enqueue(hipq, "mine")
    await tick(reconciler)
    await _status(hipq, "mine", status="failed", error={"kind": "timeout", "from_partner": True})
    await tick(reconciler)
    assert (await job(hipq, "mine")).status is JobState.QUEUED  # retried: its own try only
    assert reconciler.partner.effective(spec) == 10
    await enqueue(hipq, "slow")
    await tick(reconciler)
    clock.advance(31)  # hipq's own deadline passes: that is a timed-out try
    await tick(reconciler)
    await tick(reconciler)
    assert reconciler.partner.effective(spec) == 5

"""``hipq.Throttled`` in a Python target (issue 48; docs/throttling.md, "The partner's
word"; docs/configuration.md, "Python targets"): the function is the partner's
caller, so its "not now" is the partner's. The try ends ``throttled``: the job goes
back to ``queued``, its attempt not spent, its scope paused for ``retry_after``
(capped by ``backoff.max_partner_seconds``; none: the doubling), the ``usage`` kept
in the try's error data. A result carrying ``usage`` is kept as it is. The engine on
the memory store, the real Python target, the clock moved by hand."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import hipq as hipq_package
from hipq import Throttled
from hipq.config import QueueConfig
from hipq.engine import Reconciler
from hipq.jobs import Job, JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Targets
from hipq.testing import FakeClock
from tests.engine._helpers import enqueue, history, job, tick

# job id -> the Throttled arguments of its next try (taken once); others succeed
THROTTLE: dict[str, dict[str, Any]] = {}


def _answer(job: Job) -> dict[str, Any]:
    given = THROTTLE.pop(job.id, None)
    if given is not None:
        raise Throttled(**given)
    return {"text": "done", "usage": {"input_tokens": 12, "output_tokens": 800}}


async def async_target(job: Job) -> dict[str, Any]:
    return _answer(job)


def plain_target(job: Job) -> dict[str, Any]:  # run in the target's threads
    return _answer(job)


@pytest.fixture(autouse=True)
def _clean() -> Any:
    THROTTLE.clear()
    yield
    THROTTLE.clear()


def _reconciler(store: Store, clock: FakeClock) -> Reconciler:
    return Reconciler(store, clock=clock, owner="o1", targets=Targets())


def _queue(function: str = "async_target", *, in_tick: bool = False,
           **settings: Any) -> QueueConfig:
    return QueueConfig(id="q", target={
        "kind": "python", "function": f"tests.engine.test_python_throttled:{function}",
        "in_tick": in_tick}, attempts=2, **settings)


async def _ticks(reconciler: Reconciler, count: int = 2) -> None:
    for _ in range(count):
        await tick(reconciler)


def test_throttled_is_public() -> None:
    assert hipq_package.Throttled is Throttled
    assert "Throttled" in hipq_package.__all__


@pytest.mark.parametrize(("function", "in_tick"), [
    ("async_target", False), ("plain_target", False), ("async_target", True),
    ("plain_target", True)])
async def test_a_raised_throttled_gives_the_try_back_and_pauses_the_queue(
        hipq: Hipq, store: Store, clock: FakeClock, function: str, in_tick: bool) -> None:
    reconciler = _reconciler(store, clock)
    await hipq.create_queue(_queue(function, in_tick=in_tick))
    await enqueue(hipq, "a")
    await enqueue(hipq, "b")
    THROTTLE["a"] = {"retry_after": 2.0, "usage": {"cost": 812}}
    await _ticks(reconciler)

    stored = await job(hipq, "a")
    assert (stored.status, stored.attempt) == (JobState.QUEUED, 0)  # not spent
    assert stored.run_at == clock.now() + timedelta(seconds=2)
    [tried] = await history(hipq, "a")
    assert tried.outcome == "throttled"
    assert tried.error is not None
    data = tried.error["data"]
    assert (data["retry_after"], data["usage"], data["from_partner"]) == (2.0, {"cost": 812},
                                                                          True)
    assert tried.error["detail"] == "throttled by the target (hipq.Throttled)"
    [pause] = await store.backoff_list(queues=["q"])
    assert (pause.group, pause.until) == (None, clock.now() + timedelta(seconds=2))
    assert pause.reason == "throttled by the target (hipq.Throttled)"

    await enqueue(hipq, "c")  # due, but the queue is paused
    clock.advance(1)
    await _ticks(reconciler)
    assert (await job(hipq, "c")).status is JobState.QUEUED
    clock.advance(1)
    await _ticks(reconciler, 3)
    done = await job(hipq, "a")
    assert (done.status, done.attempt) == (JobState.SUCCEEDED, 1)
    # a result with ``usage`` is kept as the function returned it
    assert done.result == {"text": "done",
                           "usage": {"input_tokens": 12, "output_tokens": 800}}
    assert (await job(hipq, "c")).status is JobState.SUCCEEDED


@pytest.mark.parametrize(("backoff", "seconds"), [({}, 3600),
                                                  ({"max_partner_seconds": 90}, 90)])
async def test_a_huge_retry_after_is_capped_like_any_partner_time(
        hipq: Hipq, store: Store, clock: FakeClock, backoff: dict[str, Any],
        seconds: int) -> None:
    reconciler = _reconciler(store, clock)
    await hipq.create_queue(_queue(backoff=backoff))
    await enqueue(hipq, "a")
    THROTTLE["a"] = {"retry_after": 1e12}
    await _ticks(reconciler)
    stored = await job(hipq, "a")
    assert (stored.status, stored.attempt) == (JobState.QUEUED, 0)
    assert stored.run_at == clock.now() + timedelta(seconds=seconds)
    [pause] = await store.backoff_list(queues=["q"])
    assert pause.until == clock.now() + timedelta(seconds=seconds)


async def test_without_retry_after_the_doubling_applies_in_the_group(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    reconciler = _reconciler(store, clock)
    await hipq.create_queue(_queue(backoff={"scope": "group", "field": "key",
                                            "initial_seconds": 3}))
    await enqueue(hipq, "a", data={"key": "k1"})
    await enqueue(hipq, "b", data={"key": "k2"})
    THROTTLE["a"] = {"detail": "quota of k1"}
    await _ticks(reconciler)
    stored = await job(hipq, "a")
    assert (stored.status, stored.attempt) == (JobState.QUEUED, 0)
    assert stored.run_at == clock.now() + timedelta(seconds=3)  # backoff.initial_seconds
    [pause] = await store.backoff_list(queues=["q"])
    assert (pause.group, pause.reason) == ("k1", "quota of k1")
    assert "usage" not in (await history(hipq, "a"))[0].error["data"]  # type: ignore[index]
    assert (await job(hipq, "b")).status is JobState.SUCCEEDED  # its group goes on

"""A tick costs O(what changed) (docs/internals.md): with thousands of tries running and
nothing arriving, an idle tick sends the store nothing whose size grows with the
running set; a response is found without listing the running keys."""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

import pytest

from hipq.bodies import EnqueueRequest, ResponseRequest
from hipq.engine import Reconciler
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import queue, tick

RUNNING = 10_000
SMALL = 10  # no argument or answer of an idle tick may be larger than this


class Recording:
    """The real store, with the size of every argument and answer noted."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.calls: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        if not callable(method):
            return method

        async def call(*args: Any, **kwargs: Any) -> Any:
            answer = await method(*args, **kwargs)
            sizes = [len(v) for v in (*args, *kwargs.values(), answer)
                     if isinstance(v, Sized) and not isinstance(v, str | bytes)]
            self.calls.append((name, max(sizes, default=0)))
            return answer

        return call


@pytest.mark.slow
async def test_an_idle_tick_does_not_grow_with_the_running_set(
        store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    hipq = Hipq(store, clock=clock)
    await hipq.create_queue(queue())
    await hipq.enqueue_many("q", [(f"j{i}", EnqueueRequest()) for i in range(RUNNING)])
    recording = Recording(store)
    reconciler = Reconciler(recording, clock=clock, owner="o1",  # type: ignore[arg-type]
                            targets=Targets(memory={"t": target}))
    while len(reconciler.batch) < RUNNING:
        await tick(reconciler)
    clock.advance(5)
    await tick(reconciler)  # confirmations, sweeps
    recording.calls.clear()
    clock.advance(5)
    result = await tick(reconciler)
    assert not result.changed
    assert [c for c in recording.calls if c[1] > SMALL] == []

    job = target.launched[RUNNING // 2]
    assert job.correlation_key is not None
    await hipq.report_response(job.correlation_key, ResponseRequest(attempt=job.attempt))
    recording.calls.clear()
    result = await tick(reconciler)
    assert result.responses_applied == 1
    assert result.finished == 1
    assert [c for c in recording.calls if c[1] > SMALL] == []


@pytest.mark.slow
async def test_a_tick_with_a_new_job_does_not_list_the_running_jobs(
        store: Store, clock: FakeClock, target: MemoryTarget,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in throttler and the fetch plan read the batch's kept sums
    (weights, ordering keys, quota field values), not the running jobs."""
    hipq = Hipq(store, clock=clock)
    await hipq.create_queue(queue(concurrency=RUNNING + 10, quotas={
        "field": "region", "shares": {"east": 0.5, "west": 0.5}}))
    await hipq.enqueue_many("q", [
        (f"j{i}", EnqueueRequest(data={"region": "east" if i % 2 else "west"},
                                 ordering_key=f"k{i}")) for i in range(RUNNING)])
    reconciler = Reconciler(store, clock=clock, owner="o1",
                            targets=Targets(memory={"t": target}))
    while len(reconciler.batch) < RUNNING:
        await tick(reconciler)

    def listed(queue: str) -> list[Any]:
        raise AssertionError(f"the running jobs of {queue} were listed")

    monkeypatch.setattr(reconciler.batch, "running", listed)
    await hipq.enqueue_many("q", [("east-1", EnqueueRequest(data={"region": "east"})),
                                  ("key-1", EnqueueRequest(ordering_key="k1")),
                                  ("west-1", EnqueueRequest(data={"region": "west"}))])
    clock.advance(1)
    result = await tick(reconciler)
    # east and west each hold 1,500 of their 1,505 units; key k1 is busy
    assert sorted(j.id for j in target.launched[RUNNING:]) == ["east-1", "west-1"]
    assert result.launched == 2

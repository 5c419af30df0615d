"""A try that waits lets its job go (the batch keeps what a tick reads; docs/internals.md, "The
batch"): whatever needs the rest reads it back from the database, so nothing a user sees
changes. Each case makes the try wait through a tick first."""

from __future__ import annotations

import pytest

from hipq.engine import Reconciler
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, job, queue, respond, tick
from tests.engine._plugins import RecordingThrottler
from tests.engine.test_adoption import LEASE

NOTE = {"plugin": "hipq.contrib.retries:retry_with_note"}


async def _waiting(hipq: Hipq, reconciler: Reconciler, clock: FakeClock, *ids: str,
                   **data: object) -> None:
    """Claim the jobs, then one more tick: they wait, their jobs let go."""
    for job_id in ids:
        await enqueue(hipq, job_id, data=dict(data))
    await tick(reconciler)
    clock.advance(1)
    await tick(reconciler)
    assert all(reconciler.batch["q", i].job is None for i in ids)


async def test_a_failed_try_gives_the_retry_strategy_its_job_read_back(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, target: MemoryTarget) -> None:
    await hipq.create_queue(queue(attempts=3, retry=NOTE))
    await _waiting(hipq, reconciler, clock, "a", keep=1)

    await respond(hipq, "a", status="failed")
    assert (await tick(reconciler)).retried == 1

    stored = await job(hipq, "a")
    assert (stored.status, stored.data) == (JobState.QUEUED,
                                            {"keep": 1, "failures": ["response_failed"]})
    clock.set(stored.run_at)
    await tick(reconciler)
    assert [j.data for j in target.launched][-1] == stored.data


async def test_a_timed_out_try_gives_the_retry_strategy_its_job_read_back(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    await hipq.create_queue(queue(attempts=3, timeout_seconds=30, retry=NOTE))
    await _waiting(hipq, reconciler, clock, "a", keep=1)

    clock.advance(30)
    result = await tick(reconciler)

    assert (result.timed_out, result.retried) == (1, 1)
    assert (await job(hipq, "a")).data == {"keep": 1, "failures": ["timeout"]}


async def test_a_waiting_try_succeeds_or_is_extended_without_its_job(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    await hipq.create_queue(queue(timeout_seconds=30))
    await _waiting(hipq, reconciler, clock, "a", "b")

    await respond(hipq, "a", result={"ok": True})
    await respond(hipq, "b", status="running", extend_seconds=60)  # a heartbeat
    result = await tick(reconciler)

    assert (result.finished, result.responses_applied) == (1, 2)
    done = await job(hipq, "a")
    assert (done.status, done.result) == (JobState.SUCCEEDED, {"ok": True})
    clock.advance(59)  # past the first deadline, not the heartbeat's
    assert (await tick(reconciler)).timed_out == 0
    clock.advance(1)
    assert (await tick(reconciler)).timed_out == 1


async def test_a_new_quota_field_counts_the_running_jobs_read_back(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    await hipq.create_queue(queue(concurrency=10, quotas={
        "field": "region", "shares": {"eu": 0.5, "us": 0.5}}))
    await _waiting(hipq, reconciler, clock, "a", "b", region="eu", tenant="t1")

    await hipq.create_queue(queue(concurrency=10, quotas={
        "field": "tenant", "shares": {"t1": 0.2, "t2": 0.8}}))
    await enqueue(hipq, "c", data={"tenant": "t1"})
    await enqueue(hipq, "d", data={"tenant": "t2"})
    result = await tick(reconciler)

    # t1's share is 2 of 10 and both are held by the tries let go: only "d" launches
    assert result.launched == 1
    assert (await job(hipq, "d")).status is JobState.RUNNING
    assert reconciler.batch.usage("q", "tenant").field_weights == {"t1": 2, "t2": 1}


async def test_a_plugin_throttler_sees_every_running_job_whole(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, store: Store) -> None:
    RecordingThrottler.seen = []
    await hipq.create_queue(queue(throttler={
        "plugin": "tests.engine._plugins:RecordingThrottler"}))
    await enqueue(hipq, "a", data={"n": 1})
    await tick(reconciler)
    clock.advance(1)
    await tick(reconciler)
    assert reconciler.batch["q", "a"].job is not None  # its queue keeps jobs

    await enqueue(hipq, "b", data={"n": 2})
    await tick(reconciler)
    assert RecordingThrottler.seen[-1] == [{"n": 1}]

    # a successor adopts both (adoption lets jobs go) and reads them back for it
    successor = Reconciler(store, clock=clock, owner="o2", config=LEASE,
                           targets=Targets(memory={"t": MemoryTarget()}))
    clock.advance(31)
    await enqueue(hipq, "c", data={"n": 3})
    assert (await tick(successor)).adopted == 2
    assert sorted(d["n"] for d in RecordingThrottler.seen[-1]) == [1, 2]  # type: ignore[type-var]


async def test_an_adoption_reads_the_running_set_a_page_at_a_time(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock, store: Store,
        monkeypatch: pytest.MonkeyPatch) -> None:
    pages: list[int] = []
    load = store.job_load_running

    async def counted(**kwargs: object) -> object:
        found = await load(**kwargs)  # type: ignore[arg-type]
        pages.append(len(found))
        return found

    monkeypatch.setattr("hipq.engine.leases.ADOPT_PAGE", 3)
    await hipq.create_queue(queue())
    ids = [f"j{i}" for i in range(7)]
    await _waiting(hipq, reconciler, clock, *ids)
    monkeypatch.setattr(store, "job_load_running", counted)
    successor = Reconciler(store, clock=clock, owner="o2", config=LEASE,
                           targets=Targets(memory={"t": MemoryTarget()}))
    clock.advance(31)

    assert (await tick(successor)).adopted == 7
    assert pages == [3, 3, 1]
    assert all(successor.batch["q", i].job is None for i in ids)
    for job_id in ids:
        await respond(hipq, job_id, status="failed")
    assert (await tick(successor)).retried == 7  # the retry decisions read the jobs back
    assert {(await job(hipq, i)).status for i in ids} == {JobState.QUEUED}

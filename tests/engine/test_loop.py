"""The tick's five steps, in order, and the defensive copy (docs/internals.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hipq.engine import Reconciler
from hipq.errors import TransientStoreError
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, history, inbox_outcomes, job, queue, respond, tick

RETRY_AT_ONCE = {"strategy": "fixed", "delay_seconds": 0}


async def test_a_response_is_applied_at_step_0_of_the_next_tick(
        hipq: Hipq, reconciler: Reconciler) -> None:
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    await tick(reconciler)
    await respond(hipq, "a", result={"ok": 1})

    assert (await job(hipq, "a")).status is JobState.RUNNING  # waits in the inbox
    result = await tick(reconciler)

    assert (result.responses_applied, result.finished) == (1, 1)
    done = await job(hipq, "a")
    assert (done.status, done.result) == (JobState.SUCCEEDED, {"ok": 1})
    assert reconciler.batch == {}


async def test_a_retried_job_is_persisted_queued_and_dropped_from_the_batch(
        hipq: Hipq, reconciler: Reconciler, clock: FakeClock) -> None:
    await hipq.create_queue(queue(retry={"strategy": "fixed", "delay_seconds": 10}))
    await enqueue(hipq, "a")
    await tick(reconciler)
    await respond(hipq, "a", status="failed")

    result = await tick(reconciler)

    assert (result.retried, result.launched) == (1, 0)
    stored = await job(hipq, "a")
    assert (stored.status, stored.attempt) == (JobState.QUEUED, 1)
    assert stored.run_at == clock.now() + timedelta(seconds=10)
    assert stored.owner is None
    assert stored.correlation_key is None
    assert reconciler.batch == {}


async def test_a_retried_job_runs_again_only_after_being_fetched_again(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    await hipq.create_queue(queue(retry=RETRY_AT_ONCE))
    await enqueue(hipq, "a")
    await tick(reconciler)
    await respond(hipq, "a", status="failed")

    retrying = await tick(reconciler)  # due again at once, but fetched before step 3
    assert (retrying.retried, retrying.launched) == (1, 0)
    relaunch = await tick(reconciler)

    assert (relaunch.fetched, relaunch.launched) == (1, 1)
    assert [(j.id, j.attempt) for j in target.launched] == [("a", 1), ("a", 2)]
    assert (await job(hipq, "a")).status is JobState.RUNNING


@pytest.mark.sql_only  # reads the inbox's rows (inbox_outcomes)
async def test_a_job_leaves_running_only_once_persisted(
        hipq: Hipq, reconciler: Reconciler, store: Store, target: MemoryTarget,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 3 fails: the ended job stays in the batch (and running in the database)
    until a later tick persists it; the new batch step 3 ran beside is marked
    running and launched all the same (never left running unsent)."""
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    await tick(reconciler)
    await respond(hipq, "a")
    await enqueue(hipq, "b")
    persist = store.persist_batch

    async def unavailable(**_: object) -> set[tuple[str, str]]:
        raise TransientStoreError("database restarting")

    monkeypatch.setattr(store, "persist_batch", unavailable)
    with pytest.raises(TransientStoreError):
        await reconciler.run_once()
    await reconciler.drain()
    assert (await job(hipq, "a")).status is JobState.RUNNING
    assert set(reconciler.batch) == {("q", "a"), ("q", "b")}
    assert [j.id for j in target.launched] == ["a", "b"]
    assert (await job(hipq, "b")).status is JobState.RUNNING

    monkeypatch.setattr(store, "persist_batch", persist)
    assert (await tick(reconciler)).finished == 1
    assert (await job(hipq, "a")).status is JobState.SUCCEEDED
    assert (await job(hipq, "b")).status is JobState.RUNNING
    assert list((await inbox_outcomes(store)).values()) == ["applied"]


async def test_the_retry_plugin_sees_a_copy(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    await hipq.create_queue(queue(retry={"plugin": "tests.engine._plugins:ScribblingRetry"}))
    await enqueue(hipq, "a", data={"keep": 1})
    await tick(reconciler)
    await respond(hipq, "a", status="failed")

    assert (await tick(reconciler)).retried == 1
    assert (await job(hipq, "a")).data == {"keep": 1}
    assert (await tick(reconciler)).launched == 1
    assert [j.data for j in target.launched] == [{"keep": 1}, {"keep": 1}]


async def test_the_throttler_sees_snapshots(
        hipq: Hipq, reconciler: Reconciler, target: MemoryTarget) -> None:
    throttler = {"plugin": "tests.engine._plugins:ScribblingThrottler"}
    await hipq.create_queue(queue(throttler=throttler))
    await enqueue(hipq, "a", data={"keep": 1})
    await tick(reconciler)
    await enqueue(hipq, "b", data={"keep": 2})  # "a" is now among the running jobs

    assert (await tick(reconciler)).launched == 1

    assert [j.data for j in target.launched] == [{"keep": 1}, {"keep": 2}]
    assert (await job(hipq, "a")).data == {"keep": 1}
    assert (await job(hipq, "b")).data == {"keep": 2}
    assert reconciler.batch["q", "a"].job.data == {"keep": 1}


async def test_each_try_is_recorded_in_the_history(
        hipq: Hipq, reconciler: Reconciler) -> None:
    await hipq.create_queue(queue(retry=RETRY_AT_ONCE))
    await enqueue(hipq, "a")
    await tick(reconciler)
    await respond(hipq, "a", status="failed", error={"detail": "boom"})
    await tick(reconciler)
    await tick(reconciler)
    await respond(hipq, "a")
    await tick(reconciler)

    tries = await history(hipq, "a")
    assert [(t.attempt, t.outcome) for t in tries] == [(1, "response_failed"), (2, "succeeded")]
    assert tries[0].error is not None
    assert tries[0].error["detail"] == "boom"


async def test_capacity_freed_at_step_0_is_reused_in_the_same_tick(
        hipq: Hipq, reconciler: Reconciler, store: Store, target: MemoryTarget) -> None:
    await hipq.create_queue(queue(concurrency=1))
    await enqueue(hipq, "a")
    await tick(reconciler)
    await enqueue(hipq, "b")
    await respond(hipq, "a")

    result = await tick(reconciler)

    assert (result.finished, result.launched) == (1, 1)
    assert target.ids() == ["a", "b"]
    assert [j.id for j in await store.job_load_running(queue="q")] == ["b"]


async def test_the_jobs_table_is_vacuumed_every_so_many_jobs(
        hipq: Hipq, store: Store, clock: FakeClock, target: MemoryTarget,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from hipq.config import ReconcileConfig

    calls: list[int] = []
    real = store.jobs_vacuum

    async def counted() -> bool:
        calls.append(1)
        return await real()

    monkeypatch.setattr(store, "jobs_vacuum", counted)
    reconciler = Reconciler(store, clock=clock, owner="o1", targets=Targets(memory={"t": target}),
                            config=ReconcileConfig(vacuum_every=6))
    await hipq.create_queue(queue())
    for i in range(4):
        await enqueue(hipq, f"a{i}")
    await tick(reconciler)  # 4 launched
    assert calls == []
    for i in range(4):
        await respond(hipq, f"a{i}")
    await tick(reconciler)  # 4 finished: 8 moved
    assert calls == [1]
    for i in range(4):
        await enqueue(hipq, f"b{i}")
    await tick(reconciler)  # 4 launched
    for i in range(4):
        await respond(hipq, f"b{i}")
    await tick(reconciler)  # 4 finished
    # PostgreSQL vacuums again after 6 more; SQLite said there is nothing to do
    assert len(calls) == (2 if store.dialect == "postgresql" else 1)

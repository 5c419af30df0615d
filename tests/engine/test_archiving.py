"""In-tick archives written while the next tick runs (the executor's archives
written behind, hipq.engine.executor): under a backlog on PostgreSQL a tick leaves
its archive statements running and the next one collects them. Nothing runs twice
while an archive is in flight, the counts arrive one tick later, a failed archive
loses nothing, and a stopping daemon writes everything before it goes."""

from __future__ import annotations

import asyncio
from typing import Any

from hipq.engine.executor import KEEP_SECONDS
from hipq.errors import TransientStoreError
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.testing import FakeClock
from tests.engine._helpers import enqueue, job, queue, tick
from tests.engine.test_inline import InProcess, reconciler_for, succeeded


async def _backlog(hipq: Hipq, count: int) -> None:
    await hipq.create_queue(queue())
    for i in range(count):
        await enqueue(hipq, f"j{i:02d}")


async def test_a_backlog_counts_each_archive_once_one_tick_later(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    target = InProcess(succeeded)
    reconciler = reconciler_for(store, clock, target, fetch_limit=4)
    await _backlog(hipq, 10)
    results = [await tick(reconciler) for _ in range(5)]
    assert sorted(target.ids()) == [f"j{i:02d}" for i in range(10)]
    assert sum(r.ran_inline for r in results) == sum(r.finished for r in results) == 10
    assert sum(len(r.ended) for r in results) == 10
    if store.dialect == "postgresql":
        # full pages (4, 4) are archived while the next tick runs; the last page (2) in
        # its own tick, after the one before it
        assert [(r.launched, r.archiving, r.ran_inline) for r in results[:3]] == [
            (4, 4, 0), (4, 4, 4), (2, 0, 6)]
    else:  # SQLite: every tick archives its own
        assert all(r.archiving == 0 for r in results)
        assert [r.ran_inline for r in results[:3]] == [4, 4, 2]
    assert len(reconciler.archives) == 0
    for i in range(10):
        assert (await job(hipq, f"j{i:02d}")).status is JobState.SUCCEEDED


async def test_a_job_whose_archive_is_in_flight_is_not_read_again(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    """The next tick reads afresh (its page read ahead too old to take) while the
    last page's archive has not committed: those jobs still read as queued, and are
    left out."""
    target = InProcess(succeeded)
    reconciler = reconciler_for(store, clock, target, fetch_limit=3)
    await _backlog(hipq, 7)
    release = asyncio.Event()
    archive = store.job_archive_ran_many
    calls = 0

    async def held_back(**kwargs: Any) -> set[tuple[str, str]]:
        nonlocal calls
        calls += 1
        if calls == 1 and store.dialect == "postgresql":  # SQLite awaits it in its tick
            await release.wait()
        return await archive(**kwargs)

    store.job_archive_ran_many = held_back  # type: ignore[method-assign]
    await reconciler.run_once()  # j00-j02 run, their archive held back
    clock.advance(KEEP_SECONDS + 1)  # the page read ahead is dropped
    second = asyncio.ensure_future(reconciler.run_once())
    await asyncio.sleep(0.3)
    release.set()
    await second
    await reconciler.drain()
    while (await tick(reconciler)).launched:
        pass
    assert sorted(target.ids()) == [f"j{i:02d}" for i in range(7)]  # none twice
    for i in range(7):
        assert (await job(hipq, f"j{i:02d}")).status is JobState.SUCCEEDED


async def test_a_failed_archive_leaves_its_jobs_queued_to_run_again(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    target = InProcess(succeeded)
    reconciler = reconciler_for(store, clock, target, fetch_limit=3)
    await _backlog(hipq, 6)
    archive = store.job_archive_ran_many
    calls = 0

    async def fails_once(**kwargs: Any) -> set[tuple[str, str]]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise TransientStoreError("connection lost")
        return await archive(**kwargs)

    store.job_archive_ran_many = fails_once  # type: ignore[method-assign]
    results = []
    for _ in range(6):
        try:
            results.append(await tick(reconciler))
        except TransientStoreError:  # SQLite, memory: the tick that awaited it fails
            assert store.dialect != "postgresql"
            await reconciler.drain()
    for i in range(6):
        assert (await job(hipq, f"j{i:02d}")).status is JobState.SUCCEEDED
    # the first page ran, its archive failed, so it ran again: each of the others once
    assert sorted(target.ids()) == sorted([f"j{i:02d}" for i in range(6)]
                                          + ["j00", "j01", "j02"])
    assert sum(r.ran_inline for r in results) == 6
    assert len(reconciler.archives) == 0


async def test_a_stopping_reconciler_writes_and_counts_its_archives(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    """As the daemon stops: stop, drain (the archive in flight is written), then a
    last tick (it counts it); nothing is left in flight."""
    target = InProcess(succeeded)
    reconciler = reconciler_for(store, clock, target, fetch_limit=3)
    await _backlog(hipq, 5)
    first = await reconciler.run_once()
    reconciler.stop()
    await reconciler.drain()
    last = await reconciler.run_once()
    assert first.ran_inline + last.ran_inline == 3
    assert last.launched == 0
    assert len(reconciler.archives) == 0
    for i in range(3):
        assert (await job(hipq, f"j{i:02d}")).status is JobState.SUCCEEDED
    for i in range(3, 5):
        assert (await job(hipq, f"j{i:02d}")).status is JobState.QUEUED

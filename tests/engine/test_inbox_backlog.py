"""A backlog of responses other writers left in the inbox (another daemon, or this
one before a restart) is read over several ticks, each bounded in rows and in the
responses' JSON text (``hipq.engine.inbox``): what one tick holds does not grow
with the backlog, and every response is applied all the same, none twice."""

from __future__ import annotations

import pytest

from hipq.engine import Reconciler
from hipq.engine import inbox as inbox_module
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.store import Response, Store
from hipq.targets import Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, inbox_outcomes, job, queue, tick
from tests.engine.test_tick_cost import Recording

RESULT_CHARS = 600  # each response's result, as JSON text


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    # a page: at most 4 rows and, past its first, 1,000 characters (two 600-character
    # results); a tick: at most 2 pages
    monkeypatch.setattr(inbox_module, "NEW_ROWS_PAGE", 4)
    monkeypatch.setattr(inbox_module, "PAGE_CHARS", 1000)
    monkeypatch.setattr(inbox_module, "NEW_PAGES_PER_TICK", 2)


async def _running(store: Store, clock: FakeClock, target: MemoryTarget,
                   count: int) -> tuple[Hipq, Reconciler, Recording, list[str]]:
    recording = Recording(store)
    reconciler = Reconciler(recording, clock=clock, owner="o1",  # type: ignore[arg-type]
                            targets=Targets(memory={"t": target}))
    reconciler.inbox.use_events()  # new rows are read when told, or once a second
    hipq = Hipq(store, clock=clock)
    await hipq.create_queue(queue())
    ids = [f"j{i:02d}" for i in range(count)]  # (none: the queue alone)
    for job_id in ids:
        await enqueue(hipq, job_id)
    await tick(reconciler)  # launched: each running, its key waiting for a response
    keys = [(await job(hipq, job_id)).correlation_key or "" for job_id in ids]
    # written by another writer: read back by the cursor, not handed over in memory
    if keys:
        await store.inbox_insert_many(
            [Response(correlation_key=k, result="r" * (RESULT_CHARS - 2)) for k in keys],
            now=clock.now())
        reconciler.inbox.arrived()
    recording.calls.clear()
    return hipq, reconciler, recording, ids


@pytest.mark.sql_only  # reads the inbox's rows (inbox_outcomes)
@pytest.mark.usefixtures("small_pages")
async def test_a_backlog_is_read_a_bounded_part_a_tick(
        store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    hipq, reconciler, recording, ids = await _running(store, clock, target, 11)
    applied: list[int] = []
    for _ in range(10):
        result = await tick(reconciler)  # the clock stands still: no once-a-second read
        applied.append(result.responses_applied)
        if not reconciler.inbox.backlog:
            break
    # two pages of two rows each (their text is the bound) a tick, until the last
    assert applied == [4, 4, 3]
    reads = [size for name, size in recording.calls if name == "inbox_pending_scan"]
    assert len(reads) == 6  # two a tick
    assert max(reads) <= 2
    for job_id in ids:
        done = await job(hipq, job_id)
        assert (done.status, done.result) == (JobState.SUCCEEDED, "r" * (RESULT_CHARS - 2))
    assert set((await inbox_outcomes(store)).values()) == {"applied"}


@pytest.mark.usefixtures("small_pages")
async def test_a_backlog_read_is_not_repeated_without_news(
        store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    """Once the backlog is read, the cursor is past it: a tick with nothing new
    arriving reads nothing until its once-a-second read."""
    _, reconciler, recording, _ = await _running(store, clock, target, 5)
    while True:
        await tick(reconciler)
        if not reconciler.inbox.backlog:
            break
    recording.calls.clear()
    result = await tick(reconciler)
    assert result.responses_applied == 0
    assert [n for n, _ in recording.calls if n == "inbox_pending_scan"] == []


@pytest.mark.usefixtures("small_pages")
async def test_rows_left_pending_below_the_cursor_do_not_stop_the_read(
        store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    """Responses no job of the batch claims (another daemon's, or early ones) stay
    pending below the cursor, where each read starts again (rows committed out of
    id order). More of them than a tick's bound must not hold the new ones back:
    a read left unfinished goes on after its last row at the next tick."""
    hipq, reconciler, _, _ = await _running(store, clock, target, 0)
    await store.inbox_insert_many(
        [Response(correlation_key=f"nobody-{i}", result="n" * (RESULT_CHARS - 2))
         for i in range(10)], now=clock.now())
    reconciler.inbox.arrived()
    for _ in range(10):  # read, unclaimed, left pending (the clock stands still)
        await tick(reconciler)
        if not reconciler.inbox.backlog:
            break
    assert not reconciler.inbox.backlog
    ids = [f"late-{i}" for i in range(6)]
    for job_id in ids:
        await enqueue(hipq, job_id)
    await tick(reconciler)
    keys = [(await job(hipq, job_id)).correlation_key or "" for job_id in ids]
    await store.inbox_insert_many(
        [Response(correlation_key=k, result="r" * (RESULT_CHARS - 2)) for k in keys],
        now=clock.now())
    reconciler.inbox.arrived()
    applied = 0
    for _ in range(10):
        applied += (await tick(reconciler)).responses_applied
        if not reconciler.inbox.backlog:
            break
    assert applied == len(ids)
    assert {(await job(hipq, job_id)).status for job_id in ids} == {JobState.SUCCEEDED}


async def test_an_unbounded_backlog_is_read_in_one_tick_below_the_bounds(
        store: Store, clock: FakeClock, target: MemoryTarget) -> None:
    """With the shipped bounds, an ordinary backlog is one tick's read."""
    _, reconciler, _, ids = await _running(store, clock, target, 30)
    result = await tick(reconciler)
    assert result.responses_applied == len(ids)
    assert not reconciler.inbox.backlog

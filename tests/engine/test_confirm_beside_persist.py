"""Step 3 beside a write of launch confirmations (issue 28).

A confirmation is written in the background when the target acknowledges a launch;
with a fast downstream, the response of a launch is applied while its confirmation
is still being written. On PostgreSQL a statement that finds its row changed by
another transaction meanwhile leaves it alone, so an archive written beside a
confirmation of the same row used to skip it: the try left the batch, still
``running`` in the database, and was never finished. Step 3 no longer waits for the
confirmations (it used to hold the launcher's lock); ``persist_batch`` sends such a
change again (tests/contract/test_step3_beside_writes.py). Here the whole tick: the
try ends, leaves the batch, and the confirmation written beside it changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from hipq.engine import Reconciler
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Targets
from hipq.testing import FakeClock
from tests.engine._helpers import enqueue, job, queue, respond
from tests.engine.test_pipelined_launch import Pipelined


def _url(store: Store) -> str:
    return store.engine.url.set(  # type: ignore[attr-defined,no-any-return]
        drivername="postgresql").render_as_string(hide_password=False)


@asynccontextmanager
async def _row_held(store: Store, job_id: str) -> AsyncIterator[Callable[[], Any]]:
    """PostgreSQL: another transaction updates the job's row (as a confirmation
    does) and keeps it until the returned function commits it, once a statement
    waits for the row. SQLite has one writer at a time: nothing is held there."""
    if store.dialect != "postgresql":
        yield lambda: asyncio.sleep(0)
        return
    other = await asyncpg.connect(_url(store))
    try:
        writing = other.transaction()
        await writing.start()
        await other.execute("UPDATE jobs SET launch_confirmed = true WHERE id = $1", job_id)

        async def commit_once_waited_for() -> None:
            for _ in range(1000):  # polled: the server says when a statement waits
                if await other.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                        "'Lock' AND datname = current_database()"):
                    break
                await asyncio.sleep(0.01)
            await writing.commit()

        yield commit_once_waited_for
    finally:
        await other.close()


async def _turns(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _launched(hipq: Hipq, store: Store, clock: FakeClock,
                    *ids: str) -> tuple[Pipelined, Reconciler]:
    """A reconciler that launched these jobs into a pipelined target (no answer yet)."""
    target = Pipelined()
    reconciler = Reconciler(store, clock=clock, owner="o1",
                            targets=Targets(memory={"t": target}))
    await hipq.create_queue(queue())
    for job_id in ids:
        await enqueue(hipq, job_id)
    await reconciler.run_once()
    await _turns()
    return target, reconciler


async def test_a_try_ends_while_its_confirmation_is_being_written(
        hipq: Hipq, store: Store, clock: FakeClock, monkeypatch: Any) -> None:
    target, reconciler = await _launched(hipq, store, clock, "a", "b")
    await respond(hipq, "b", result=1)  # a fast downstream: b's answer is in...

    gate, started, confirm = asyncio.Event(), asyncio.Event(), store.job_confirm_launch_many
    confirming: list[list[tuple[str, str, int]]] = []

    async def slow_confirm(**kwargs: Any) -> Any:
        confirming.append(list(kwargs["keys"]))
        started.set()
        await gate.wait()
        return await confirm(**kwargs)

    monkeypatch.setattr(store, "job_confirm_launch_many", slow_confirm)
    target.sent["b"].set_result(None)  # ...while its confirmation is being written
    await asyncio.wait_for(started.wait(), 5)
    assert [k[1] for k in confirming[0]] == ["b"]

    async with _row_held(store, "b") as commit:
        ticking = asyncio.ensure_future(reconciler.run_once())
        # PostgreSQL: step 3 waits for the row (not for the launcher), which then
        # changes under its statement
        await asyncio.wait_for(commit(), 10)
        result = await asyncio.wait_for(ticking, 10)
    assert result.finished == 1
    assert reconciler.batch.get(("q", "b")) is None  # it left the batch...
    assert (await job(hipq, "b")).status is JobState.SUCCEEDED  # ...and ended in the database
    gate.set()
    target.sent["a"].set_result(None)
    await reconciler.launcher.flush()
    a = await job(hipq, "a")
    assert (a.status, a.launch_confirmed) == (JobState.RUNNING, True)
    await reconciler.drain()


@pytest.mark.parametrize("answered_first", [True, False])
async def test_the_persist_does_not_wait_for_the_confirmations(
        hipq: Hipq, store: Store, clock: FakeClock, monkeypatch: Any,
        answered_first: bool) -> None:
    """A confirmation that hangs (a slow database connection, say) holds up no tick."""
    target, reconciler = await _launched(hipq, store, clock, "a", "b")
    if answered_first:
        await respond(hipq, "b", result=1)
    gate, started, confirm = asyncio.Event(), asyncio.Event(), store.job_confirm_launch_many

    async def stuck_confirm(**kwargs: Any) -> Any:
        started.set()
        await gate.wait()
        return await confirm(**kwargs)

    monkeypatch.setattr(store, "job_confirm_launch_many", stuck_confirm)
    target.sent["a"].set_result(None)
    target.sent["b"].set_result(None)
    await asyncio.wait_for(started.wait(), 5)  # the confirmations are being written
    if not answered_first:
        await respond(hipq, "b", result=1)
    result = await asyncio.wait_for(reconciler.run_once(), 10)
    assert result.finished == 1
    assert (await job(hipq, "b")).status is JobState.SUCCEEDED
    gate.set()
    await reconciler.drain()
    a = await job(hipq, "a")
    assert (a.status, a.launch_confirmed) == (JobState.RUNNING, True)


async def test_answers_close_together_are_confirmed_in_one_statement(
        hipq: Hipq, store: Store, clock: FakeClock, monkeypatch: Any) -> None:
    """The first confirmation waits CONFIRM_LINGER_SECONDS for others: under load, a
    statement (a commit) per round trip to the database made small ones."""
    target, reconciler = await _launched(hipq, store, clock, "a", "b", "c")
    statements: list[list[str]] = []
    confirm, written = store.job_confirm_launch_many, asyncio.Event()

    async def counted(**kwargs: Any) -> Any:
        statements.append(sorted(k[1] for k in kwargs["keys"]))
        answer = await confirm(**kwargs)
        written.set()
        return answer

    monkeypatch.setattr(store, "job_confirm_launch_many", counted)
    for job_id in ("a", "b", "c"):  # answered a few loop turns apart
        target.sent[job_id].set_result(None)
        await _turns(5)
    await asyncio.wait_for(written.wait(), 5)
    assert statements == [["a", "b", "c"]]
    assert all([(await job(hipq, j)).launch_confirmed for j in "abc"])
    await reconciler.drain()

"""A caller cancelled in the middle of a store call (a shutdown cancelling its
watchers, a client giving up) leaves the store as usable as before, on each driver.

On SQLite this failed: aiosqlite runs a statement in its connection's thread, and a
cancelled ``BEGIN IMMEDIATE`` left a connection holding the write lock outside the
pool; every later transaction waited ``busy_timeout`` (10 s) and failed with
"database is locked" until the garbage collector closed it (a shutdown's last tick
timed out in CI). :mod:`hipq.store.uncancelled` runs each call to its end."""

from __future__ import annotations

import asyncio
import contextlib
import time

from hipq.store import InsertStatus, Store
from hipq.testing import FakeClock

from .test_store import Q, make_job

ROUNDS = 150
PROMPT_SECONDS = 2.0  # far under busy_timeout's 10 s; a healthy call takes milliseconds


async def cancelled_midway(call: object, round_no: int) -> None:
    """Start ``call`` in a task and cancel it after a delay that moves through the
    call's first few milliseconds (where its statements run)."""
    task = asyncio.ensure_future(call)  # type: ignore[arg-type]
    await asyncio.sleep((round_no % 30) * 0.0001)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def prompt(call: object) -> object:
    started = time.monotonic()
    task = asyncio.ensure_future(call)  # type: ignore[arg-type]
    done, _ = await asyncio.wait({task}, timeout=PROMPT_SECONDS)
    assert task in done, "a store call waited on a lock a cancelled call left behind"
    assert time.monotonic() - started < PROMPT_SECONDS
    return task.result()


async def test_cancelled_reads_leave_no_lock(store: Store, clock: FakeClock) -> None:
    await store.queue_upsert({"id": Q}, now=clock.now())
    for round_no in range(ROUNDS):
        await cancelled_midway(store.intake_last_id(), round_no)
        await prompt(store.lease_list())
    await prompt(store.queue_upsert({"id": Q}, now=clock.now()))


async def test_a_cancelled_write_is_whole_or_absent(store: Store, clock: FakeClock) -> None:
    await store.queue_upsert({"id": Q}, now=clock.now())
    for round_no in range(ROUNDS // 3):
        jobs = [make_job(clock, f"r{round_no}-{n}") for n in range(20)]
        await cancelled_midway(store.job_insert_many(jobs), round_no)
        found = [await prompt(store.job_get(Q, job.id)) for job in jobs]
        assert len({item is None for item in found}) <= 1, "a write cut in half"
    results = await prompt(store.job_insert_many([make_job(clock, "after")]))
    assert [r.status for r in results] == [InsertStatus.CREATED]  # type: ignore[attr-defined]


async def test_close_waits_for_a_call_whose_caller_left(store: Store, clock: FakeClock) -> None:
    await store.queue_upsert({"id": Q}, now=clock.now())
    task = asyncio.ensure_future(store.job_insert_many([make_job(clock, "late")]))
    await asyncio.sleep(0)
    task.cancel()
    await store.close()  # the call ran to its end behind the cancelled caller
    assert store.checked_out() == 0  # type: ignore[attr-defined]

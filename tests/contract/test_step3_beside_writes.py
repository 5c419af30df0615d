"""Step 3 applies to a row another transaction changed while it ran (PostgreSQL).

The step-3 statements address each row by the ctid their lookup found. When another
transaction updates the row first (a launch confirmation, an UPDATE by hand), the
statement waits for its lock, finds a newer row version with another ctid and skips
it without an error: the try used to leave the batch while its job stayed
``running`` for ever. ``persist_batch`` now sends such a change again, its row
looked up afresh by key; the guards (owner, attempt) still decide."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg
import pytest

from hipq.jobs import JobState
from hipq.store import Change, ChangeKind, Store
from hipq.testing import FakeClock
from tests.contract.test_store import OWNER, Q, archive, get, make_job, start

pytestmark = pytest.mark.sql_only  # another transaction's writes to a row


def _url(store: Store) -> str:
    return store.engine.url.set(  # type: ignore[attr-defined,no-any-return]
        drivername="postgresql").render_as_string(hide_password=False)


async def _beside(store: Store, statement: str, changes: list[Change],
                  clock: FakeClock, owner: str = OWNER) -> set[tuple[str, str]]:
    """``persist_batch(changes)`` while another transaction holds ``statement``'s
    update of one row, committed once the persist waits for it."""
    other = await asyncpg.connect(_url(store))
    try:
        writing = other.transaction()
        await writing.start()
        await other.execute(statement)
        persisting = asyncio.ensure_future(
            store.persist_batch(changes=changes, owner=owner, now=clock.now()))
        await asyncio.sleep(0.3)
        assert not persisting.done()  # it waits for the row's lock
        await writing.commit()
        return await asyncio.wait_for(persisting, 10)
    finally:
        await other.close()


@pytest.fixture(autouse=True)
def _postgresql_only(store: Store) -> None:
    if store.dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time")


async def test_an_archive_applies_beside_a_confirmation_of_its_row(store: Store,
                                                                   clock: FakeClock) -> None:
    jobs = await start(store, clock, *(make_job(clock, f"j{i}") for i in range(3)))
    applied = await _beside(
        store, "UPDATE jobs SET launch_confirmed = true WHERE id = 'j1'",
        [archive(job) for job in jobs], clock)
    assert applied == {(Q, "j0"), (Q, "j1"), (Q, "j2")}
    for job in jobs:
        assert await store.job_get(Q, job.id) is None or (
            await get(store, job.id)).status is JobState.SUCCEEDED


async def test_a_requeue_and_an_extension_apply_beside_writes_of_their_rows(
        store: Store, clock: FakeClock) -> None:
    first, second = await start(store, clock, make_job(clock, "r"), make_job(clock, "e"))
    common = {"queue": Q, "launched_at": first.launched_at}
    changes = [
        Change(kind=ChangeKind.REQUEUE, id="r", attempt=first.attempt,
               run_at=clock.now() + timedelta(seconds=5), outcome="failed",
               error={"kind": "transport"}, correlation_key=first.correlation_key, **common),
        Change(kind=ChangeKind.EXTEND, id="e", attempt=second.attempt,
               deadline=clock.now() + timedelta(hours=1),
               correlation_key=second.correlation_key, **common)]
    applied = await _beside(
        store, "UPDATE jobs SET launch_confirmed = true WHERE id IN ('r', 'e')", changes, clock)
    assert applied == {(Q, "r"), (Q, "e")}
    assert (await get(store, "r")).status is JobState.QUEUED
    extended = await get(store, "e")
    assert extended.deadline == clock.now() + timedelta(hours=1)


async def test_a_change_whose_row_another_owner_took_meanwhile_still_does_not_apply(
        store: Store, clock: FakeClock) -> None:
    jobs = await start(store, clock, make_job(clock, "a"), make_job(clock, "b"))
    applied = await _beside(store, "UPDATE jobs SET owner = 'someone-else' WHERE id = 'b'",
                            [archive(job) for job in jobs], clock)
    assert applied == {(Q, "a")}
    taken = await get(store, "b")
    assert (taken.status, taken.owner) == (JobState.RUNNING, "someone-else")

"""A running job's updates stay on its row's page (schema version 12, PostgreSQL).

The jobs table fills new pages to 70%, so a launch confirmation, which changes no
indexed column, is written beside the row version it replaces: a HOT update, with
no new index entries. On pages filled to the brim (fillfactor 100, as before
version 12) the same confirmations went to other pages, each with an entry in
every index of the row (``bench/run``'s callback round trip: 690 bytes of WAL a
confirmation, 200 with the room; docs/benchmarks.md)."""

from __future__ import annotations

import asyncpg  # type: ignore[import-untyped]
import pytest

from hipq.store import Store, open_store
from hipq.testing import FakeClock
from tests.contract.test_store import OWNER, Q, make_job, start

# alone: a database made meanwhile on the server (another test's) keeps PostgreSQL from
# pruning the claim's row versions, and the confirmations find no room on their page
pytestmark = [pytest.mark.parametrize("backend", ["postgresql"], indirect=True),
              pytest.mark.alone_on_server]

JOBS = 600  # some thirty pages of rows


async def _pages(raw: asyncpg.Connection) -> dict[str, int]:
    """The page each job's current row version is on."""
    rows = await raw.fetch("SELECT id, (ctid::text::point)[0]::int8 AS page FROM jobs "
                           "WHERE queue = $1", Q)
    return {r["id"]: r["page"] for r in rows}


async def _confirmations_moved(db_url: str, raw: asyncpg.Connection, clock: FakeClock) -> int:
    """Enqueue and claim JOBS jobs through the store, confirm their launches: how
    many confirmations left their row's page."""
    store: Store = await open_store(db_url)
    try:
        jobs = await start(store, clock, *(make_job(clock, f"j{i:04}") for i in range(JOBS)))
        before = await _pages(raw)
        confirmed = await store.job_confirm_launch_many(
            keys=[(Q, job.id, job.attempt) for job in jobs], owner=OWNER)
        assert confirmed == JOBS
        after = await _pages(raw)
    finally:
        await store.close()
    return sum(before[i] != after[i] for i in before)


async def test_the_jobs_table_keeps_room_on_its_pages(raw: asyncpg.Connection) -> None:
    options = await raw.fetchval("SELECT reloptions FROM pg_class WHERE oid = 'jobs'::regclass")
    assert options == ["fillfactor=70"]


async def test_a_launch_confirmation_stays_on_its_rows_page(
        db_url: str, raw: asyncpg.Connection, clock: FakeClock) -> None:
    """Not every one: a claim changes indexed columns, and where its new row versions
    took a page's room, their confirmations move (here 217 of 600, against 581
    without the room)."""
    assert await _confirmations_moved(db_url, raw, clock) <= JOBS * 2 // 5


async def test_without_the_room_confirmations_move(
        db_url: str, raw: asyncpg.Connection, clock: FakeClock) -> None:
    """What version 12 changed: the same work on full pages moves most of them."""
    await raw.execute("ALTER TABLE jobs RESET (fillfactor)")
    assert await _confirmations_moved(db_url, raw, clock) >= JOBS * 4 // 5

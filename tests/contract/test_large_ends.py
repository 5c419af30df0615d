"""Step 3 with results whose JSON goes past what one PostgreSQL text holds (1 GB): a
tick ending hundreds of tries with results of a megabyte each (callbacks at the
API's body bound; a backlog read after a restart) sent every end in one parameter,
which failed at every tick, for every queue. The ends now go in several statements
of the same transaction past ``hipq.store.pg_persist.MAX_ENDS_CHARS``; here that bound
is lowered so a few results cross it."""

from __future__ import annotations

import pytest

from hipq.jobs import JobState
from hipq.store import Store, pg_persist
from hipq.testing import FakeClock
from tests.contract.test_archive_ran import ended
from tests.contract.test_store import OWNER, Q, archive, get, insert, make_job, start

JOBS = 40
RESULT = "r" * 500  # 40 ends of about 600 characters: 24,000, split under 2,000


@pytest.fixture
def small_bound(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    if store.dialect != "postgresql":
        pytest.skip("SQLite writes the ends row by row")
    monkeypatch.setattr(pg_persist, "MAX_ENDS_CHARS", 2000)


def test_the_bound_is_far_under_postgresqls_limit() -> None:
    # one JSON text of ends, then jsonb inside the statement: 1 GB each at most
    assert pg_persist.MAX_ENDS_CHARS * 8 < 1024**3


@pytest.mark.sql_only  # PostgreSQL's statements
@pytest.mark.usefixtures("small_bound")
async def test_step_3_splits_ends_past_the_bound(store: Store, clock: FakeClock) -> None:
    jobs = await start(store, clock, *[make_job(clock, f"j{n}") for n in range(JOBS)])
    changes = [archive(j, result={"n": j.id, "pad": RESULT}) for j in jobs]
    assert len(pg_persist.ends_parts(changes)) >= 16
    applied = await store.persist_batch(changes=changes, owner=OWNER, now=clock.advance(1))
    assert applied == {(Q, j.id) for j in jobs}
    for j in jobs:
        done = await get(store, j.id)
        assert done.status is JobState.SUCCEEDED
        assert done.result == {"n": j.id, "pad": RESULT}


@pytest.mark.sql_only  # PostgreSQL's statements
@pytest.mark.usefixtures("small_bound")
async def test_in_tick_archive_splits_ends_past_the_bound(store: Store,
                                                          clock: FakeClock) -> None:
    await insert(store, *[make_job(clock, f"i{n}") for n in range(JOBS)])
    queued = [await get(store, f"i{n}") for n in range(JOBS)]
    changes = [ended(j, result={"n": j.id, "pad": RESULT}) for j in queued]
    applied = await store.job_archive_ran_many(queue=Q, changes=changes, owner=OWNER,
                                               now=clock.advance(1), heartbeat_seconds=None)
    assert applied == {(Q, j.id) for j in queued}
    assert {(await get(store, j.id)).result["pad"] for j in queued} == {RESULT}  # type: ignore[index]


def test_one_end_over_the_bound_stays_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg_persist, "MAX_ENDS_CHARS", 10)
    clock = FakeClock()
    change = ended(make_job(clock, "big"), result={"pad": RESULT})
    [(part, text)] = pg_persist.ends_parts([change])
    assert list(part) == [change]
    assert RESULT in text

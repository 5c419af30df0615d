"""Values read for listings of many are bounded by the store's statement (issue 46,
finding 5), on SQLite and PostgreSQL:

* :meth:`Store.job_get_listed` finds a job as ``job_get`` does (live, archived,
  merged) and gives each of its ``data``, ``result`` and ``error`` whole when short,
  else its JSON text cut to the bound (in ``cut``, the job's field left empty);
* a pause's scope stored whole by an earlier version is read cut, and shown so.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from hipq.pause_scope import KEPT_CHARS
from hipq.store import Store
from hipq.store.records import Backoff
from hipq.testing import FakeClock
from tests.contract.test_store import OWNER, Q, archive, make_job, merging_job, start

BIG = {"blob": "é" * 10_000}  # JSON text of 10,000+ characters


async def test_a_listed_job_has_its_large_values_cut(store: Store, clock: FakeClock) -> None:
    await store.job_insert_many([make_job(clock, "big", data=BIG),
                                 make_job(clock, "small", data={"k": "v"})])
    found = await store.job_get_listed(Q, "big", value_chars=100)
    assert found is not None
    assert found.job.id == "big"
    assert found.job.data == {}
    assert set(found.cut) == {"data"}
    assert len(found.cut["data"]) == 100
    assert found.cut["data"].replace(" ", "").startswith('{"blob":"')  # its JSON text
    small = await store.job_get_listed(Q, "small", value_chars=100)
    assert small is not None
    assert small.job.data == {"k": "v"}
    assert small.cut == {}
    assert await store.job_get_listed(Q, "nobody", value_chars=100) is None


async def test_archived_and_merged_jobs_are_listed_cut(store: Store, clock: FakeClock) -> None:
    (job,) = await start(store, clock, make_job(clock, "done", data=BIG))
    error = {"kind": "response_failed", "detail": "x" * 5_000}
    await store.persist_batch(changes=[archive(job, status="failed", error=error,
                                               result=["r"] * 3_000)],
                              owner=OWNER, now=clock.now())
    found = await store.job_get_listed(Q, "done", value_chars=1_000)
    assert found is not None
    assert found.job.status == "failed"
    assert found.job.finished_at is not None
    assert (found.job.data, found.job.result, found.job.error) == ({}, None, None)
    assert {name: len(text) for name, text in found.cut.items()} == {
        "data": 1_000, "result": 1_000, "error": 1_000}
    whole = await store.job_get_listed(Q, "done", value_chars=100_000)
    assert whole is not None
    assert whole.cut == {}
    assert whole.job.error is not None
    assert whole.job.error["detail"] == "x" * 5_000

    await store.job_merge(merging_job(clock, "m1", "a" * 3_000))
    await store.job_merge(merging_job(clock, "m2", "b"))
    held = await store.job_get_listed(Q, "m2", value_chars=100)  # merged into m1
    assert held is not None
    assert held.job.id == "m1"
    assert set(held.cut) == {"data"}


@pytest.mark.sql_only  # rows written by an earlier version: none in memory
async def test_a_pause_stored_whole_before_is_read_cut(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    old = "v" * 5_000  # a group stored whole by an earlier version
    kept = "w" * 200  # the longest group the bound makes
    await store.backoff_replace(queue=Q, backoffs=[
        Backoff(queue=Q, group=group, until=now + timedelta(seconds=60), reason="HTTP 429",
                since=now) for group in (old, kept, None)])
    groups = sorted((b.group or "" for b in await store.backoff_list(queues=[Q])), key=len)
    assert groups == ["", "v" * KEPT_CHARS + "…", kept]
    everyone = await store.backoff_list()
    assert sorted((b.group or "" for b in everyone), key=len) == groups

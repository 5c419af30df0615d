"""``job_archive_ran_many``: a try that ran within its tick (hipq.engine.inline) is
claimed and ended at once. What it leaves is what the claim and step 3's archive
leave one after the other; a job cancelled, claimed or tried again meanwhile is
left as it is."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import pytest

from hipq.engine.inline import try_of
from hipq.jobs import Job, JobState
from hipq.store import Change, ChangeKind, Store
from hipq.testing import FakeClock
from tests.contract.test_store import OWNER, Q, archive, get, insert, make_job, start


def ended(job: Job, **fields: Any) -> Change:
    """The change of a try of the queued ``job`` that succeeded within its tick."""
    values: dict[str, Any] = {"status": "succeeded", "outcome": "succeeded",
                              "result": {"ok": job.id}, "launched_at": None, **fields}
    return Change(kind=ChangeKind.ARCHIVE, queue=job.queue, id=job.id,
                  attempt=job.attempt + 1, **values)


def _comparable(job: Job) -> dict[str, Any]:
    skip = {"id", "token", "correlation_key", "data", "result", "body_hash"}
    return {f.name: getattr(job, f.name) for f in fields(job) if f.name not in skip}


async def test_a_try_is_archived_as_the_claim_and_step_3_leave_it(
        store: Store, clock: FakeClock) -> None:
    await insert(store, make_job(clock, "inline", timeout_seconds=60),
                 make_job(clock, "usual", timeout_seconds=60))
    now = clock.advance(1)
    applied = await store.job_archive_ran_many(
        queue=Q, changes=[ended(await get(store, "inline"))], owner=OWNER, now=now,
        heartbeat_seconds=None)
    assert applied == {(Q, "inline")}
    [usual] = await store.job_mark_running_many(queue=Q, ids=["usual"], now=now, owner=OWNER,
                                                heartbeat_seconds=None)
    await store.job_confirm_launch_many(keys=[(Q, "usual", 1)], owner=OWNER)
    assert await store.persist_batch(changes=[archive(usual, result={"ok": "usual"})],
                                     owner=OWNER, now=now) == {(Q, "usual")}

    inline, expected = await get(store, "inline"), await get(store, "usual")
    assert inline.status is JobState.SUCCEEDED
    assert inline.result == {"ok": "inline"}
    assert (inline.attempt, inline.launched_at, inline.owner) == (1, now, OWNER)
    assert inline.deadline == expected.deadline
    assert inline.correlation_key == "~tok-inline.1"
    assert _comparable(inline) == _comparable(expected)
    [try_] = await store.job_attempts(Q, "inline")
    [usual_try] = await store.job_attempts(Q, "usual")
    assert (try_.attempt, try_.outcome) == (1, "succeeded")
    assert try_ == usual_try  # the same history entry, response and error included
    history, usual_history = (await store.job_history(Q, "inline", limit=5),
                              await store.job_history(Q, "usual", limit=5))
    assert (history.tries, history.total) == (usual_history.tries, 1)
    if store.dialect == "postgresql":
        # the entry is the archived row itself (schema version 11): no job_attempts
        # row, so a response to the try's key is not found (it is unmatched)
        assert await store.archived_by_attempt_keys(["~tok-inline.1"]) == {}
    else:  # the claim and step 3, one after the other: the try is recorded
        assert await store.archived_by_attempt_keys(["~tok-inline.1"]) == {
            "~tok-inline.1": (Q, "inline")}


async def test_a_try_with_more_to_tell_is_recorded(store: Store, clock: FakeClock) -> None:
    """Only a plain success is kept in the archived row: a try that ended otherwise,
    or with a response to keep, has its own history row, after the earlier ones."""
    await insert(store, make_job(clock, "f"), make_job(clock, "r"))
    [failed] = await start(store, clock, make_job(clock, "s2"))
    requeue = Change(kind=ChangeKind.REQUEUE, queue=Q, id="s2", attempt=1, run_at=clock.now(),
                     error={"kind": "response_failed"}, outcome="response_failed",
                     correlation_key=failed.correlation_key, launched_at=failed.launched_at)
    assert await store.persist_batch(changes=[requeue], owner=OWNER, now=clock.now())
    now = clock.advance(1)
    changes = [ended(await get(store, "f"), status="failed", outcome="response_failed",
                     error={"kind": "boom"}),
               ended(await get(store, "r"), response={"status": "succeeded", "result": 1}),
               ended(await get(store, "s2"))]
    applied = await store.job_archive_ran_many(queue=Q, changes=changes, owner=OWNER, now=now,
                                               heartbeat_seconds=None)
    assert applied == {(Q, "f"), (Q, "r"), (Q, "s2")}
    [f] = await store.job_attempts(Q, "f")
    assert (f.outcome, f.error) == ("response_failed", {"kind": "boom"})
    [r] = await store.job_attempts(Q, "r")
    assert r.response == {"status": "succeeded", "result": 1}
    # the second try of s2 is its last entry, after the first one's row
    tries = await store.job_attempts(Q, "s2")
    assert [(t.attempt, t.outcome) for t in tries] == [(1, "response_failed"), (2, "succeeded")]
    history = await store.job_history(Q, "s2", limit=1)
    assert ([(t.attempt, t.outcome) for t in history.tries], history.total) == (
        [(2, "succeeded")], 2)


async def test_the_try_is_the_one_try_of_makes(store: Store, clock: FakeClock) -> None:
    """The engine builds the try the function sees (hipq.engine.inline.try_of): its
    attempt, key and deadline are the ones stored."""
    await insert(store, make_job(clock, "a", timeout_seconds=600),
                 make_job(clock, "b", timeout_seconds=30, correlation_key="fixed-b",
                          correlation_fixed=True))
    now = clock.advance(1)
    tries = [try_of(await get(store, i), now=now, owner=OWNER, heartbeat_seconds=60)
             for i in ("a", "b")]
    applied = await store.job_archive_ran_many(
        queue=Q, changes=[replace(ended(await get(store, t.id)), attempt=t.attempt)
                          for t in tries], owner=OWNER, now=now, heartbeat_seconds=60)
    assert applied == {(Q, "a"), (Q, "b")}
    for t in tries:
        stored = await get(store, t.id)
        assert (stored.attempt, stored.correlation_key, stored.deadline, stored.launched_at) \
            == (t.attempt, t.correlation_key, t.deadline, t.launched_at)
    assert tries[1].correlation_key == "fixed-b"


async def test_a_job_cancelled_meanwhile_stays_cancelled(store: Store,
                                                         clock: FakeClock) -> None:
    await insert(store, make_job(clock, "c"))
    job = await get(store, "c")
    assert await store.job_cancel_queued(queue=Q, job_id="c", now=clock.now()) is not None
    applied = await store.job_archive_ran_many(queue=Q, changes=[ended(job)], owner=OWNER,
                                               now=clock.advance(1), heartbeat_seconds=None)
    assert applied == set()
    assert (await get(store, "c")).status is JobState.CANCELLED
    assert await store.job_attempts(Q, "c") == []


async def test_a_job_claimed_meanwhile_is_left_running(store: Store, clock: FakeClock) -> None:
    [queued] = [make_job(clock, "r")]
    await insert(store, queued)
    job = await get(store, "r")
    await store.job_mark_running_many(queue=Q, ids=["r"], now=clock.now(), owner="daemon-b",
                                      heartbeat_seconds=None)
    applied = await store.job_archive_ran_many(queue=Q, changes=[ended(job)], owner=OWNER,
                                               now=clock.advance(1), heartbeat_seconds=None)
    assert applied == set()
    running = await get(store, "r")
    assert (running.status, running.owner, running.attempt) == (JobState.RUNNING, "daemon-b", 1)


async def test_a_job_tried_again_meanwhile_is_left_queued(store: Store,
                                                          clock: FakeClock) -> None:
    """Another daemon ran the job's first try and queued it again: the stale try of
    this one (attempt 1) no longer applies."""
    if store.dialect == "sqlite":
        pytest.skip("one daemon on SQLite: nothing claims between its fetch and its end")
    [running] = await start(store, clock, make_job(clock, "t"), owner="daemon-b")
    stale = ended(replace(running, attempt=0))
    requeue = Change(kind=ChangeKind.REQUEUE, queue=Q, id="t", attempt=1, run_at=clock.now(),
                     error={"kind": "response_failed"}, outcome="response_failed",
                     correlation_key=running.correlation_key, launched_at=running.launched_at)
    assert await store.persist_batch(changes=[requeue], owner="daemon-b",
                                     now=clock.now()) == {(Q, "t")}
    applied = await store.job_archive_ran_many(queue=Q, changes=[stale], owner=OWNER,
                                               now=clock.advance(1), heartbeat_seconds=None)
    assert applied == set()
    again = await get(store, "t")
    assert (again.status, again.attempt) == (JobState.QUEUED, 1)


async def test_nothing_to_end_writes_nothing(store: Store, clock: FakeClock) -> None:
    assert await store.job_archive_ran_many(queue=Q, changes=[], owner=OWNER,
                                            now=clock.now(), heartbeat_seconds=None) == set()

"""A try that succeeded by its target's own answer (a Python target's return, an
HTTP target's final answer), under a key hipq made for that try, is held by its
archived row on PostgreSQL (schema version 13): no ``job_attempts`` row beside it,
and the same history as before. A late response to its key still finds it, and is
recorded after it. SQLite records every try in ``job_attempts``; what the store
answers is the same on both."""

from __future__ import annotations

from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from hipq.jobs import Job
from hipq.store import Change, ChangeKind, Store, open_store
from hipq.store.records import InboxRow
from hipq.testing import FakeClock
from tests.contract.test_store import OWNER, Q, archive, make_job, start

TARGET = {"source": "target"}


async def _ended(store: Store, clock: FakeClock, job_id: str, *,
                 response: Any = TARGET, status: str = "succeeded", **fields: Any) -> Job:
    """``job_id`` claimed, its launch confirmed and its try ended (``response``)."""
    [job] = await start(store, clock, make_job(clock, job_id, **fields))
    await store.job_confirm_launch_many(keys=[(Q, job.id, job.attempt)], owner=OWNER)
    change = archive(job, status=status, result={"ok": job_id}, response=response)
    assert await store.persist_batch(changes=[change], owner=OWNER,
                                     now=clock.advance(1)) == {(Q, job_id)}
    return job


def _late(key: str, n: int, clock: FakeClock) -> InboxRow:
    return InboxRow(id=n, correlation_key=key, attempt=None, status="succeeded",
                    retryable=None, result={"again": n}, error=None, extend_seconds=None,
                    source="http", received_at=clock.now())


async def test_the_history_is_as_before(store: Store, clock: FakeClock) -> None:
    job = await _ended(store, clock, "a")
    [try_] = await store.job_attempts(Q, "a")
    assert (try_.attempt, try_.outcome, try_.error) == (1, "succeeded", None)
    assert try_.response == TARGET
    assert (try_.launched_at, try_.finished_at) == (job.launched_at, clock.now())
    history = await store.job_history(Q, "a", limit=5)
    assert (len(history.tries), history.total) == (1, 1)
    assert history.tries[0].outcome == "succeeded"
    assert await store.archived_by_attempt_keys([job.correlation_key or ""]) == {
        job.correlation_key: (Q, "a")}


async def test_a_late_response_finds_the_try_and_comes_after_it(
        store: Store, clock: FakeClock) -> None:
    job = await _ended(store, clock, "a")
    key = job.correlation_key or ""
    await store.attempt_record_late_many([(Q, "a", _late(key, 1, clock))],
                                         now=clock.advance(1))
    await store.attempt_record_late_many([(Q, "a", _late(key, 2, clock))],
                                         now=clock.advance(1))
    tries = await store.job_attempts(Q, "a")
    # without an attempt number, a late response goes to the latest try of its key
    assert [(t.attempt, t.outcome) for t in tries] == [
        (1, "succeeded"), (1, "late_response"), (1, "late_response")]
    assert [t.response for t in tries] == [
        TARGET, {"status": "succeeded", "result": {"again": 1}},
        {"status": "succeeded", "result": {"again": 2}}]
    last = await store.job_history(Q, "a", limit=2)
    assert [t.outcome for t in last.tries] == ["late_response", "late_response"]
    assert last.total == 3
    every = await store.job_history(Q, "a", limit=5)
    assert [t.outcome for t in every.tries] == ["succeeded", "late_response", "late_response"]


async def test_an_earlier_try_stays_before_it(store: Store, clock: FakeClock) -> None:
    """A failed try given back to the queue, then the success: both, in order."""
    [job] = await start(store, clock, make_job(clock, "r"))
    requeue = Change(kind=ChangeKind.REQUEUE, queue=Q, id="r", attempt=1, run_at=clock.now(),
                     error={"kind": "response_failed"}, outcome="response_failed",
                     correlation_key=job.correlation_key, launched_at=job.launched_at,
                     response=TARGET)
    assert await store.persist_batch(changes=[requeue], owner=OWNER, now=clock.advance(1))
    [again] = await store.job_mark_running_many(queue=Q, ids=["r"], now=clock.advance(1),
                                                owner=OWNER, heartbeat_seconds=None)
    assert await store.persist_batch(changes=[archive(again, response=TARGET)], owner=OWNER,
                                     now=clock.advance(1)) == {(Q, "r")}
    tries = await store.job_attempts(Q, "r")
    assert [(t.attempt, t.outcome) for t in tries] == [(1, "response_failed"), (2, "succeeded")]
    assert tries[1].response == TARGET
    assert (await store.job_history(Q, "r", limit=5)).total == 2


# -- what PostgreSQL writes -------------------------------------------------------------


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_only_a_plain_success_by_the_target_is_folded(
        db_url: str, raw: asyncpg.Connection, clock: FakeClock) -> None:
    store: Store = await open_store(db_url)
    try:
        await _ended(store, clock, "target")
        await _ended(store, clock, "callback", response={"source": "http"})
        await _ended(store, clock, "failed", status="failed")
        await _ended(store, clock, "no-response", response=None)
        await _ended(store, clock, "fixed-key", correlation_key="order-1",
                     correlation_fixed=True)
        rows = {r["job_id"] for r in await raw.fetch("SELECT job_id FROM job_attempts")}
        assert rows == {"callback", "failed", "no-response", "fixed-key"}
        held = await raw.fetch("SELECT id, history_folded, history_source FROM archived_jobs "
                               "WHERE history_folded OR history_source IS NOT NULL")
        assert [tuple(r) for r in held] == [("target", True, "target")]
        # each one's history says what it did
        for job_id in ("target", "callback", "failed", "no-response", "fixed-key"):
            [try_] = await store.job_attempts(Q, job_id)
            assert try_.attempt == 1
        [fixed] = await store.job_attempts(Q, "fixed-key")
        assert fixed.response == TARGET
        assert await store.archived_by_attempt_keys(["order-1"]) == {"order-1": (Q, "fixed-key")}
    finally:
        await store.close()

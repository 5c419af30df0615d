"""The driver-conformance suite of :class:`hipq.store.Store`: every test runs
against each driver (the ``store`` fixture: SQLite and PostgreSQL), through the
protocol's methods only, and times come from a :class:`FakeClock`. A new driver
passes this file before anything else uses it."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest

from hipq.config import QueueConfig
from hipq.jobs import Attempt, Job, JobState, Ordering
from hipq.store import (
    Change,
    ChangeKind,
    InboxOutcome,
    InboxRow,
    InsertStatus,
    Response,
    Store,
    open_store,
)
from hipq.testing import FakeClock

Q = "q"
OWNER = "daemon-a"
OTHER = "daemon-b"


def make_job(clock: FakeClock, job_id: str, *, queue: str = Q, run_at: datetime | None = None,
             body_hash: str = "hash-1", **fields: Any) -> Job:
    now = clock.now()
    fields.setdefault("data", {"n": job_id})
    return Job(id=job_id, queue=queue, run_at=run_at or now, created_at=now, updated_at=now,
               token=f"tok-{job_id}", body_hash=body_hash, **fields)


async def insert(store: Store, *jobs: Job) -> None:
    outcomes = await store.job_insert_many(jobs)
    assert [o.status for o in outcomes] == [InsertStatus.CREATED] * len(jobs)


async def start(store: Store, clock: FakeClock, *jobs: Job, owner: str = OWNER,
                heartbeat_seconds: float | None = None) -> list[Job]:
    """Insert ``jobs`` and claim them as running."""
    await insert(store, *jobs)
    running = await store.job_mark_running_many(
        queue=jobs[0].queue, ids=[j.id for j in jobs], now=clock.now(), owner=owner,
        heartbeat_seconds=heartbeat_seconds)
    assert [j.id for j in running] == [j.id for j in jobs]
    return running


def archive(job: Job, *, status: str = "succeeded", **fields: Any) -> Change:
    values: dict[str, Any] = {"attempt": job.attempt, "launched_at": job.launched_at,
                              "correlation_key": job.correlation_key, **fields}
    return Change(kind=ChangeKind.ARCHIVE, queue=job.queue, id=job.id, status=status,
                  outcome=status, **values)


async def get(store: Store, job_id: str, queue: str = Q) -> Job:
    job = await store.job_get(queue, job_id)
    assert job is not None
    return job


# -- queues -------------------------------------------------------------------------


async def test_queue_upsert_creates_then_replaces(store: Store, clock: FakeClock) -> None:
    created_at = clock.now()
    assert await store.queue_upsert({"id": Q, "attempts": 2}, now=created_at) is True
    updated_at = clock.advance(60)
    assert await store.queue_upsert({"id": Q, "attempts": 7}, now=updated_at) is False

    record = await store.queue_get(Q)
    assert record is not None
    assert record.spec.attempts == 7
    assert (record.created_at, record.updated_at) == (created_at, updated_at)


# every key of a queue's settings, a secret among them
SETTINGS = {
    "id": Q, "delivery_strategy": "at_most_once", "attempts": 5, "concurrency": 10,
    "critical_concurrency": 2, "ordering": "priority_then_time", "aging_seconds": 5,
    "timeout_seconds": 30, "heartbeat_timeout_seconds": 10, "default_weight": 2,
    "timezone": "Europe/Paris", "time_windows": [{"start": "09:00", "end": "17:00"}],
    "quotas": {"field": "tenant", "shares": {"a": 0.5}, "default": 0.25, "lend_unused": True},
    "rate_limit": {"launches": 5, "per_seconds": 1, "by": "tenant"},
    "backoff": {"scope": "group", "field": "tenant", "initial_seconds": 2, "max_seconds": 10},
    "adaptive": {"min": 2, "increase_every": 5, "decrease": 0.7},
    "merge_by_ordering_key": True, "ordering_key_mode": "relaxed_on_retry",
    "target": {"kind": "http", "url": "http://127.0.0.1:9/x", "auth": {"token": "s3cret"}},
    "correlation": {"response": "{body.key}"}, "throttler": {"plugin": "plugins.x:Y"},
    "retry": {"strategy": "exponential", "base_seconds": 2, "options": {"max_seconds": 9}},
}


async def test_queue_settings_are_kept_and_read_as_a_spec(store: Store,
                                                          clock: FakeClock) -> None:
    """The store keeps a queue's settings as their JSON mapping and gives them back
    with the spec made of them: the spec the edge's model makes of the same settings."""
    config = QueueConfig.model_validate(SETTINGS)
    await store.queue_upsert(config.stored(), now=clock.now())
    record = await store.queue_get(Q)
    assert record is not None
    assert record.settings == {**config.stored(), "paused": False}
    assert record.spec == config.to_spec()
    assert (record.spec.custom_throttler, record.spec.retry.options) == (
        True, {"base_seconds": 2, "max_seconds": 9})
    assert QueueConfig.model_validate(record.settings) == config
    with pytest.raises(TypeError):
        record.settings["attempts"] = 1  # type: ignore[index]
    (listed,) = await store.queue_list()
    assert (listed.spec, listed.settings) == (record.spec, record.settings)


async def test_queue_settings_are_stored_not_shared(store: Store, clock: FakeClock) -> None:
    """What the caller does to the mapping it gave, or a reader to one it got, is
    not the store's."""
    settings: dict[str, Any] = {"id": Q, "concurrency": 2,
                                "quotas": {"field": "t", "shares": {"a": 0.5}}}
    await store.queue_upsert(settings, now=clock.now())
    settings["quotas"]["shares"]["a"] = 1.0
    record = await store.queue_get(Q)
    assert record is not None
    record.settings["quotas"]["shares"]["b"] = 0.25
    again = await store.queue_get(Q)
    assert again is not None
    assert again.settings["quotas"]["shares"] == {"a": 0.5}
    assert dict(again.spec.quotas.shares) == {"a": 0.5}  # type: ignore[union-attr]


async def test_queue_list_makes_a_spec_once_per_change(store: Store, clock: FakeClock) -> None:
    await store.queue_upsert({"id": Q, "concurrency": 3}, now=clock.now())
    (first,) = await store.queue_list()
    (again,) = await store.queue_list()
    assert again.spec is first.spec
    await store.queue_set_paused(Q, True, now=clock.advance(1))
    (paused,) = await store.queue_list()
    assert paused.spec is not first.spec
    assert (paused.spec.paused, paused.settings["paused"], paused.spec.concurrency) == (
        True, True, 3)


async def test_queue_get_missing_is_none(store: Store) -> None:
    assert await store.queue_get("nope") is None


async def test_queue_list_is_sorted_by_id(store: Store, clock: FakeClock) -> None:
    for name in ("b", "c", "a"):
        await store.queue_upsert({"id": name}, now=clock.now())
    assert [r.id for r in await store.queue_list()] == ["a", "b", "c"]


async def test_queue_set_paused(store: Store, clock: FakeClock) -> None:
    await store.queue_upsert({"id": Q}, now=clock.now())

    assert await store.queue_set_paused(Q, True, now=clock.now()) is True
    record = await store.queue_get(Q)
    assert record is not None
    assert record.paused is True
    assert record.spec.paused is True
    assert record.settings["paused"] is True
    assert await store.queue_set_paused("nope", True, now=clock.now()) is False


# -- enqueue ------------------------------------------------------------------------


async def test_insert_creates_and_round_trips(store: Store, clock: FakeClock) -> None:
    job = make_job(clock, "j1", priority=5, weight=3, critical=True, max_attempts=4,
                   run_at=clock.now() + timedelta(microseconds=123457),
                   expires_at=clock.now() + timedelta(hours=1), ordering_key="k",
                   time_windows=[{"start": "09:00", "end": "17:00"}], timezone="Europe/Paris",
                   timeout_seconds=12.5, replay_of="j0", data={"nested": {"list": [1, None]}})
    [outcome] = await store.job_insert_many([job])

    assert outcome.status is InsertStatus.CREATED
    assert await get(store, "j1") == job


async def test_insert_many_keeps_each_jobs_own_values(store: Store, clock: FakeClock) -> None:
    """A batch where some columns are equal for every job and others are not (on
    PostgreSQL the equal ones travel once): each job round-trips exactly, even
    where Python calls different values equal ({"a": 1} == {"a": True})."""
    jobs = [make_job(clock, "a", data={"a": 1}, priority=5, result=1),
            make_job(clock, "b", data={"a": True}, priority=5, result=True),
            make_job(clock, "c", data={"a": 1.0}, priority=5, result="1", timeout_seconds=9),
            make_job(clock, "d", data={"a": 1}, priority=7, expires_at=clock.now())]
    await insert(store, *jobs)
    for job in jobs:
        stored = await get(store, job.id)
        assert stored == job
        assert stored.data == job.data
        assert type(stored.data["a"]) is type(job.data["a"])
        assert type(stored.result) is type(job.result)
    pair = [make_job(clock, "e", data={"x": 1}), make_job(clock, "f", data={"x": True})]
    await insert(store, *pair)  # equal in Python, every other column the same
    assert [(await get(store, j.id)).data["x"] for j in pair] == [1, True]
    assert type((await get(store, "e")).data["x"]) is int
    await insert(store, make_job(clock, "alone", data={"only": "one"}))
    assert (await get(store, "alone")).data == {"only": "one"}


async def test_insert_same_body_is_exists_with_the_stored_job(store: Store,
                                                             clock: FakeClock) -> None:
    first = make_job(clock, "j1")
    await insert(store, first)
    repeat = make_job(clock, "j1", priority=1)  # same body_hash: an idempotent repeat

    [outcome] = await store.job_insert_many([repeat])
    assert outcome.status is InsertStatus.EXISTS
    assert outcome.job == first


async def test_insert_other_body_is_conflict(store: Store, clock: FakeClock) -> None:
    await insert(store, make_job(clock, "j1"))

    [outcome] = await store.job_insert_many([make_job(clock, "j1", body_hash="hash-2")])
    assert outcome.status is InsertStatus.CONFLICT
    assert outcome.error
    assert await get(store, "j1") == make_job(clock, "j1")


async def test_insert_same_id_in_another_queue_is_created(store: Store,
                                                          clock: FakeClock) -> None:
    await insert(store, make_job(clock, "j1"))
    await insert(store, make_job(clock, "j1", queue="other"))


@pytest.mark.parametrize(("body_hash", "status"),
                         [("hash-1", InsertStatus.EXISTS), ("hash-2", InsertStatus.CONFLICT)])
async def test_insert_archived_id(store: Store, clock: FakeClock, body_hash: str,
                                  status: InsertStatus) -> None:
    await insert(store, make_job(clock, "j1"))
    await store.job_cancel_queued(queue=Q, job_id="j1", now=clock.now())

    [outcome] = await store.job_insert_many([make_job(clock, "j1", body_hash=body_hash)])
    assert outcome.status is status
    assert outcome.job is not None
    assert outcome.job.status is JobState.CANCELLED
    assert (await get(store, "j1")).status is JobState.CANCELLED  # not re-queued


async def test_insert_fixed_correlation_key_in_use_is_conflict(store: Store,
                                                              clock: FakeClock) -> None:
    await insert(store, make_job(clock, "j1", correlation_key="key", correlation_fixed=True))

    [outcome] = await store.job_insert_many(
        [make_job(clock, "j2", correlation_key="key", correlation_fixed=True)])
    assert outcome.status is InsertStatus.CONFLICT
    assert outcome.job is None
    assert await store.job_get(Q, "j2") is None


async def test_fixed_correlation_key_is_free_once_its_job_ends(store: Store,
                                                               clock: FakeClock) -> None:
    [job] = await start(store, clock,
                        make_job(clock, "j1", correlation_key="key", correlation_fixed=True))
    await store.persist_batch(changes=[archive(job)], owner=OWNER, now=clock.now())

    await insert(store, make_job(clock, "j2", correlation_key="key", correlation_fixed=True))


async def test_insert_many_answers_in_input_order(store: Store, clock: FakeClock) -> None:
    await insert(store, make_job(clock, "old"), make_job(clock, "clash"))

    outcomes = await store.job_insert_many([
        make_job(clock, "new-1"), make_job(clock, "clash", body_hash="x"),
        make_job(clock, "old"), make_job(clock, "new-2")])
    assert [(o.id, o.status) for o in outcomes] == [
        ("new-1", InsertStatus.CREATED), ("clash", InsertStatus.CONFLICT),
        ("old", InsertStatus.EXISTS), ("new-2", InsertStatus.CREATED)]


# -- fetching due jobs ----------------------------------------------------------------


async def _insert_mixed(store: Store, clock: FakeClock) -> None:
    t0 = clock.now()
    await insert(store,
                 make_job(clock, "late-urgent", run_at=t0 - timedelta(seconds=10), priority=1),
                 make_job(clock, "early-lazy", run_at=t0 - timedelta(seconds=30), priority=9),
                 make_job(clock, "b-mid", run_at=t0 - timedelta(seconds=20), priority=5),
                 make_job(clock, "a-mid", run_at=t0 - timedelta(seconds=20), priority=5),
                 make_job(clock, "mid-urgent", run_at=t0 - timedelta(seconds=20), priority=1))


async def _due_ids(store: Store, clock: FakeClock, ordering: Ordering, *,
                   limit: int = 100, critical_only: bool = False) -> list[str]:
    jobs = await store.job_fetch_due(queue=Q, now=clock.now(), limit=limit, ordering=ordering,
                                     critical_only=critical_only)
    return [j.id for j in jobs]


async def test_fetch_due_time_then_priority(store: Store, clock: FakeClock) -> None:
    await _insert_mixed(store, clock)
    assert await _due_ids(store, clock, Ordering.TIME_THEN_PRIORITY) == [
        "early-lazy", "mid-urgent", "a-mid", "b-mid", "late-urgent"]


async def test_fetch_due_priority_then_time(store: Store, clock: FakeClock) -> None:
    await _insert_mixed(store, clock)
    assert await _due_ids(store, clock, Ordering.PRIORITY_THEN_TIME) == [
        "mid-urgent", "late-urgent", "a-mid", "b-mid", "early-lazy"]


@pytest.mark.parametrize("ordering", list(Ordering))
async def test_fetch_due_is_bounded(store: Store, clock: FakeClock,
                                    ordering: Ordering) -> None:
    await _insert_mixed(store, clock)
    assert len(await _due_ids(store, clock, ordering, limit=2)) == 2


async def test_fetch_due_takes_run_at_up_to_now(store: Store, clock: FakeClock) -> None:
    now = clock.now()
    await insert(store, make_job(clock, "now", run_at=now),
                 make_job(clock, "future", run_at=now + timedelta(microseconds=1000)))

    assert await _due_ids(store, clock, Ordering.TIME_THEN_PRIORITY) == ["now"]
    clock.advance(1)
    assert await _due_ids(store, clock, Ordering.TIME_THEN_PRIORITY) == ["now", "future"]


async def test_fetch_due_only_queued_jobs_of_the_queue(store: Store,
                                                       clock: FakeClock) -> None:
    await start(store, clock, make_job(clock, "running"))
    await insert(store, make_job(clock, "queued"), make_job(clock, "elsewhere", queue="other"))

    assert await _due_ids(store, clock, Ordering.TIME_THEN_PRIORITY) == ["queued"]


@pytest.mark.parametrize("ordering", list(Ordering))
async def test_fetch_due_critical_only(store: Store, clock: FakeClock,
                                       ordering: Ordering) -> None:
    t0 = clock.now()
    await insert(store,
                 make_job(clock, "crit-late", run_at=t0, priority=1, critical=True),
                 make_job(clock, "plain", run_at=t0 - timedelta(seconds=20)),
                 make_job(clock, "crit-early", run_at=t0 - timedelta(seconds=10), priority=9,
                          critical=True))

    ids = await _due_ids(store, clock, ordering, critical_only=True)
    assert ids == ["crit-early", "crit-late"]


# -- claiming (step 4) and confirming launches -------------------------------------------


async def test_mark_running_claims(store: Store, clock: FakeClock) -> None:
    [job] = await start(store, clock, make_job(clock, "j1", timeout_seconds=90))
    now = clock.now()

    assert job.status is JobState.RUNNING
    assert job.attempt == 1
    assert job.owner == OWNER
    assert job.launched_at == now
    assert job.deadline == now + timedelta(seconds=90)
    assert job.launch_confirmed is False
    assert job.correlation_key == "~tok-j1.1"
    assert await get(store, "j1") == job


@pytest.mark.parametrize(("timeout_seconds", "heartbeat", "expected"),
                         [(90.0, 10.0, 10.0), (5.0, 10.0, 5.0), (7.5, None, 7.5)])
async def test_mark_running_deadline_is_the_shorter_of_timeout_and_heartbeat(
        store: Store, clock: FakeClock, timeout_seconds: float, heartbeat: float | None,
        expected: float) -> None:
    [job] = await start(store, clock, make_job(clock, "j1", timeout_seconds=timeout_seconds),
                        heartbeat_seconds=heartbeat)
    assert job.deadline == clock.now() + timedelta(seconds=expected)


async def test_mark_running_keeps_a_fixed_correlation_key(store: Store,
                                                          clock: FakeClock) -> None:
    [job] = await start(store, clock,
                        make_job(clock, "j1", correlation_key="mine", correlation_fixed=True))
    assert job.correlation_key == "mine"


async def test_mark_running_key_follows_the_attempt(store: Store, clock: FakeClock) -> None:
    [job] = await start(store, clock, make_job(clock, "j1", attempt=2))
    assert (job.attempt, job.correlation_key) == (3, "~tok-j1.3")


async def test_mark_running_skips_jobs_not_queued(store: Store, clock: FakeClock) -> None:
    await start(store, clock, make_job(clock, "running"))
    await insert(store, make_job(clock, "b"), make_job(clock, "a"))

    claimed = await store.job_mark_running_many(
        queue=Q, ids=["b", "running", "missing", "a"], now=clock.now(), owner=OTHER,
        heartbeat_seconds=None)
    assert [j.id for j in claimed] == ["b", "a"]
    assert (await get(store, "running")).owner == OWNER
    assert await store.job_mark_running_many(queue=Q, ids=[], now=clock.now(), owner=OTHER,
                                             heartbeat_seconds=None) == []


async def test_mark_running_only_in_the_given_queue(store: Store, clock: FakeClock) -> None:
    await insert(store, make_job(clock, "j1", queue="other"))
    assert await store.job_mark_running_many(queue=Q, ids=["j1"], now=clock.now(), owner=OWNER,
                                             heartbeat_seconds=None) == []


async def test_confirm_launch(store: Store, clock: FakeClock) -> None:
    await start(store, clock, make_job(clock, "j1"), make_job(clock, "j2"), make_job(clock, "j3"))

    assert await store.job_confirm_launch_many(keys=[(Q, "j1", 1)], owner=OWNER) == 1
    assert await store.job_confirm_launch_many(keys=[(Q, "j2", 1)], owner=OTHER) == 0
    assert await store.job_confirm_launch_many(keys=[(Q, "j3", 2)], owner=OWNER) == 0
    confirmed = {i: (await get(store, i)).launch_confirmed for i in ("j1", "j2", "j3")}
    assert confirmed == {"j1": True, "j2": False, "j3": False}


# -- persisting the batch (step 3) ------------------------------------------------------


async def test_persist_archive(store: Store, clock: FakeClock) -> None:
    [job] = await start(store, clock, make_job(clock, "j1"))
    now = clock.advance(5)

    applied = await store.persist_batch(
        changes=[archive(job, result={"ok": 1}, response={"raw": True})], owner=OWNER, now=now)

    assert applied == {(Q, "j1")}
    done = await get(store, "j1")
    assert (done.status, done.result, done.finished_at) == (JobState.SUCCEEDED, {"ok": 1}, now)
    assert await store.job_fetch_due(queue=Q, now=now, limit=10,
                                     ordering=Ordering.TIME_THEN_PRIORITY) == []
    [attempt] = await store.job_attempts(Q, "j1")
    assert (attempt.attempt, attempt.outcome, attempt.launched_at, attempt.finished_at) == (
        1, "succeeded", job.launched_at, now)
    assert attempt.response == {"raw": True}


async def test_persist_archive_failed_with_error(store: Store, clock: FakeClock) -> None:
    [job] = await start(store, clock, make_job(clock, "j1"))
    error = {"kind": "http_status", "detail": "500"}

    await store.persist_batch(changes=[archive(job, status="failed", error=error)],
                              owner=OWNER, now=clock.now())
    [failed] = await store.job_list_archived(queue=Q, status="failed")
    assert (failed.id, failed.error) == ("j1", error)


async def test_persist_requeue(store: Store, clock: FakeClock) -> None:
    [job] = await start(store, clock, make_job(clock, "j1"))
    now = clock.advance(5)
    retry_at = now + timedelta(minutes=1)
    error = {"kind": "timeout", "detail": ""}

    applied = await store.persist_batch(changes=[Change(
        kind=ChangeKind.REQUEUE, queue=Q, id="j1", attempt=1, run_at=retry_at, error=error,
        data={"n": "changed"}, outcome="timeout", launched_at=job.launched_at,
        correlation_key=job.correlation_key)], owner=OWNER, now=now)

    assert applied == {(Q, "j1")}
    again = await get(store, "j1")
    assert (again.status, again.attempt, again.run_at, again.error, again.data) == (
        JobState.QUEUED, 1, retry_at, error, {"n": "changed"})
    assert (again.owner, again.deadline, again.correlation_key) == (None, None, None)
    [attempt] = await store.job_attempts(Q, "j1")
    assert (attempt.outcome, attempt.error) == ("timeout", error)
    assert [j.id for j in await store.job_fetch_due(
        queue=Q, now=retry_at, limit=10, ordering=Ordering.TIME_THEN_PRIORITY)] == ["j1"]


async def test_persist_requeue_keeps_data_and_fixed_key(store: Store,
                                                        clock: FakeClock) -> None:
    [job] = await start(store, clock,
                        make_job(clock, "j1", correlation_key="mine", correlation_fixed=True))

    await store.persist_batch(changes=[Change(
        kind=ChangeKind.REQUEUE, queue=Q, id="j1", attempt=1, run_at=clock.now(),
        outcome="lost")], owner=OWNER, now=clock.now())
    again = await get(store, "j1")
    assert (again.data, again.correlation_key) == (job.data, "mine")


async def test_persist_extend(store: Store, clock: FakeClock) -> None:
    [job] = await start(store, clock, make_job(clock, "j1"))
    deadline = clock.now() + timedelta(hours=3)

    applied = await store.persist_batch(changes=[Change(
        kind=ChangeKind.EXTEND, queue=Q, id="j1", attempt=1, deadline=deadline)],
        owner=OWNER, now=clock.now())

    assert applied == {(Q, "j1")}
    extended = await get(store, "j1")
    assert (extended.status, extended.deadline) == (JobState.RUNNING, deadline)
    assert await store.job_attempts(Q, "j1") == []
    assert job.deadline != deadline


@pytest.mark.parametrize(("owner", "attempt"), [(OTHER, 1), (OWNER, 2), (OWNER, 0)])
async def test_persist_guards_owner_and_attempt(store: Store, clock: FakeClock, owner: str,
                                                attempt: int) -> None:
    [job] = await start(store, clock, make_job(clock, "j1"))
    [row_id] = await store.inbox_insert_many(
        [Response(correlation_key="~tok-j1.1")], now=clock.now())
    assert row_id is not None
    stale = [Change(kind=kind, queue=Q, id="j1", attempt=attempt, status="succeeded",
                    run_at=clock.now(), deadline=clock.now(), outcome="x", inbox_ids=(row_id,))
             for kind in ChangeKind]

    for change in stale:
        assert await store.persist_batch(changes=[change], owner=owner, now=clock.now()) == set()

    assert await get(store, "j1") == job
    assert await store.job_attempts(Q, "j1") == []
    assert [r.id for r in await store.inbox_pending_for_keys(["~tok-j1.1"])] == [row_id]


async def test_persist_applies_only_guarded_changes(store: Store, clock: FakeClock) -> None:
    jobs = await start(store, clock, make_job(clock, "mine"), make_job(clock, "stale"))

    applied = await store.persist_batch(
        changes=[archive(jobs[0]), archive(jobs[1], attempt=5)], owner=OWNER, now=clock.now())
    assert applied == {(Q, "mine")}
    assert (await get(store, "stale")).status is JobState.RUNNING


async def test_persist_marks_inbox_rows_in_the_same_transaction(store: Store,
                                                                clock: FakeClock) -> None:
    [job] = await start(store, clock, make_job(clock, "j1"))
    applied_id, other_id = await store.inbox_insert_many(
        [Response(correlation_key="~tok-j1.1"), Response(correlation_key="nobody")],
        now=clock.now())
    assert applied_id is not None
    assert other_id is not None

    await store.persist_batch(changes=[archive(job, inbox_ids=(applied_id,))], owner=OWNER,
                              now=clock.now(), inbox=[(other_id, InboxOutcome.UNMATCHED)])
    assert await store.inbox_pending_for_keys(["~tok-j1.1", "nobody"]) == []


async def test_persist_inbox_marks_alone(store: Store, clock: FakeClock) -> None:
    [row_id] = await store.inbox_insert_many([Response(correlation_key="k")], now=clock.now())
    assert row_id is not None

    applied = await store.persist_batch(changes=[], owner=OWNER, now=clock.now(),
                                        inbox=[(row_id, InboxOutcome.STALE)])
    assert applied == set()
    assert await store.inbox_pending_for_keys(["k"]) == []


# -- the response inbox ---------------------------------------------------------------


async def test_inbox_insert_dedup_key_duplicate_is_none(store: Store,
                                                        clock: FakeClock) -> None:
    first = await store.inbox_insert_many(
        [Response(correlation_key="k", dedup_key="m-1"), Response(correlation_key="k")],
        now=clock.now())
    again = await store.inbox_insert_many(
        [Response(correlation_key="k"), Response(correlation_key="k", dedup_key="m-1"),
         Response(correlation_key="k", dedup_key="m-2")], now=clock.now())

    assert all(isinstance(i, int) for i in first)
    assert again[1] is None
    assert isinstance(again[0], int)
    assert isinstance(again[2], int)
    assert len({*first, again[0], again[2]}) == 4
    assert len(await store.inbox_pending_for_keys(["k"])) == 4


async def test_inbox_insert_returns_ids_in_input_order(store: Store,
                                                       clock: FakeClock) -> None:
    ids = await store.inbox_insert_many([Response(correlation_key=f"k{i}") for i in range(5)],
                                        now=clock.now())
    rows = await store.inbox_pending_for_keys([f"k{i}" for i in range(5)])
    assert [(r.id, r.correlation_key) for r in rows] == [
        (i, f"k{n}") for n, i in enumerate(ids)]


async def test_inbox_row_fields_round_trip(store: Store, clock: FakeClock) -> None:
    response = Response(correlation_key="k", status="failed", attempt=2, retryable=False,
                        result={"r": [1, 2]}, error={"kind": "boom"}, extend_seconds=30.5,
                        source="kafka")
    [row_id] = await store.inbox_insert_many([response], now=clock.now())

    [row] = await store.inbox_pending_for_keys(["k"])
    assert (row.id, row.status, row.attempt, row.retryable, row.result, row.error,
            row.extend_seconds, row.source, row.received_at) == (
        row_id, "failed", 2, False, {"r": [1, 2]}, {"kind": "boom"}, 30.5, "kafka", clock.now())


async def test_inbox_pending_for_keys(store: Store, clock: FakeClock) -> None:
    ids = await store.inbox_insert_many(
        [Response(correlation_key=k) for k in ("b", "a", "c", "b")], now=clock.now())
    await store.inbox_mark_many([(ids[3], InboxOutcome.DUPLICATE)], now=clock.now())

    rows = await store.inbox_pending_for_keys(["a", "b"])
    assert [(r.id, r.correlation_key) for r in rows] == [(ids[0], "b"), (ids[1], "a")]
    assert await store.inbox_pending_for_keys([]) == []


async def test_inbox_pending_scan(store: Store, clock: FakeClock) -> None:
    ids: list[int | None] = []
    for key in ("a", "b", "c", "d", "e"):
        ids += await store.inbox_insert_many([Response(correlation_key=key)], now=clock.now())
        clock.advance(10)
    await store.inbox_mark_many([(ids[1], InboxOutcome.LATE)], now=clock.now())
    before = clock.now() - timedelta(seconds=25)  # received at +30 s, d and e are too recent

    page = await store.inbox_pending_scan(after_id=0, before=before, limit=1)
    assert ([r.correlation_key for r in page.rows], page.more) == (["a"], True)
    rest = await store.inbox_pending_scan(after_id=page.rows[-1].id, before=before, limit=10)
    assert ([r.correlation_key for r in rest.rows], rest.more) == (["c"], False)
    last = await store.inbox_pending_scan(after_id=rest.rows[-1].id, before=before, limit=10)
    assert (last.rows, last.more) == ([], False)


async def test_inbox_pending_scan_bounds_what_a_page_holds(store: Store,
                                                           clock: FakeClock) -> None:
    """A page ends before the row that would start past ``max_chars`` of result and
    error JSON text (its first row always comes, however large), and says more
    rows follow; the next page goes on from its last row, none skipped."""
    sizes = [10, 40, 40, 5, 200, 1, 1]
    await store.inbox_insert_many(
        [Response(correlation_key=f"k{i}", result="x" * (n - 2) if n >= 2 else None,
                  error={"e": 1} if i == 5 else None) for i, n in enumerate(sizes)],
        now=clock.now())
    before = clock.advance(1)
    pages: list[list[str]] = []
    after = 0
    while True:
        page = await store.inbox_pending_scan(after_id=after, before=before, limit=10,
                                              max_chars=60)
        pages.append([r.correlation_key for r in page.rows])
        if not page.more:
            break
        after = page.rows[-1].id
    # k0+k1 = 50 chars, k2 starts at 50 (< 60): in; k3 starts at 90: the next page;
    # k4 (200) alone starts that page's second row at 5: in; k5 starts at 205: next
    assert pages == [["k0", "k1", "k2"], ["k3", "k4"], ["k5", "k6"]]
    whole = await store.inbox_pending_scan(after_id=0, before=before, limit=10)
    assert (len(whole.rows), whole.more) == (7, False)
    big = await store.inbox_pending_scan(after_id=0, before=before, limit=10, max_chars=1)
    assert ([r.correlation_key for r in big.rows], big.more) == (["k0"], True)


# -- ending queued jobs -----------------------------------------------------------------


async def test_expired_sweep(store: Store, clock: FakeClock) -> None:
    t0 = clock.now()
    await insert(store, make_job(clock, "gone", expires_at=t0 + timedelta(seconds=5)),
                 make_job(clock, "gone-too", queue="other", expires_at=t0),
                 make_job(clock, "later", expires_at=t0 + timedelta(hours=1)),
                 make_job(clock, "never"))
    await start(store, clock, make_job(clock, "running", expires_at=t0))
    now = clock.advance(5)

    swept = await store.job_expired_sweep(now=now, limit=10)

    assert sorted(j.id for j in swept) == ["gone", "gone-too"]
    gone = await get(store, "gone")
    assert (gone.status, gone.finished_at, gone.error["kind"] if gone.error else None) == (
        JobState.EXPIRED, now, "expired")
    for job_id in ("later", "never"):
        assert (await get(store, job_id)).status is JobState.QUEUED
    assert (await get(store, "running")).status is JobState.RUNNING


async def test_expired_sweep_is_bounded_oldest_first(store: Store, clock: FakeClock) -> None:
    t0 = clock.now()
    await insert(store, *(make_job(clock, f"j{i}", expires_at=t0 - timedelta(seconds=i))
                          for i in range(5)))

    swept = await store.job_expired_sweep(now=t0, limit=2)
    assert sorted(j.id for j in swept) == ["j3", "j4"]
    assert len(await store.job_expired_sweep(now=t0, limit=10)) == 3


async def test_archive_queued_many(store: Store, clock: FakeClock) -> None:
    await insert(store, make_job(clock, "a"), make_job(clock, "b"))
    await start(store, clock, make_job(clock, "running"))
    error = {"kind": "dropped"}

    ended = await store.job_archive_queued_many(
        queue=Q, ends={"a": ("cancelled", error), "running": ("failed", None),
                       "missing": ("failed", None)}, now=clock.now())

    assert [(j.id, j.status, j.error) for j in ended] == [("a", JobState.CANCELLED, error)]
    assert (await get(store, "a")).status is JobState.CANCELLED
    assert (await get(store, "b")).status is JobState.QUEUED
    assert (await get(store, "running")).status is JobState.RUNNING
    assert await store.job_archive_queued_many(queue=Q, ends={}, now=clock.now()) == []


# -- reading jobs -------------------------------------------------------------------------


async def test_job_get_finds_hot_and_archived_jobs(store: Store, clock: FakeClock) -> None:
    await insert(store, make_job(clock, "hot"), make_job(clock, "cold"))
    await store.job_cancel_queued(queue=Q, job_id="cold", now=clock.now())

    hot, cold = await get(store, "hot"), await get(store, "cold")
    assert (hot.status, hot.finished_at) == (JobState.QUEUED, None)
    assert (cold.status, cold.finished_at) == (JobState.CANCELLED, clock.now())
    assert await store.job_get(Q, "missing") is None
    assert await store.job_get("other", "hot") is None


async def test_job_list_archived_newest_first(store: Store, clock: FakeClock) -> None:
    await insert(store, make_job(clock, "a"), make_job(clock, "b"),
                 make_job(clock, "c", queue="other"))
    for job_id, queue in (("a", Q), ("b", Q), ("c", "other")):
        await store.job_cancel_queued(queue=queue, job_id=job_id, now=clock.advance(1))

    assert [j.id for j in await store.job_list_archived()] == ["c", "b", "a"]
    assert [j.id for j in await store.job_list_archived(queue=Q, limit=1)] == ["b"]
    assert await store.job_list_archived(status="failed") == []


async def test_job_keys_lookup_finds_live_jobs(store: Store, clock: FakeClock) -> None:
    [job] = await start(store, clock, make_job(clock, "j1"))

    found = await store.job_keys_lookup(["~tok-j1.1", "nope"])
    assert found == {"~tok-j1.1": job}


async def test_late_responses_are_recorded_on_the_history(store: Store,
                                                          clock: FakeClock) -> None:
    [job] = await start(store, clock, make_job(clock, "j1"))
    await store.persist_batch(changes=[archive(job)], owner=OWNER, now=clock.now())
    [row_id] = await store.inbox_insert_many(
        [Response(correlation_key="~tok-j1.1", attempt=1, result={"late": True})],
        now=clock.now())
    [row] = await store.inbox_pending_for_keys(["~tok-j1.1"])

    assert await store.archived_by_attempt_keys(["~tok-j1.1", "nope"]) == {"~tok-j1.1": (Q, "j1")}
    await store.attempt_record_late_many([(Q, "j1", row)], now=clock.now())
    assert [(a.attempt, a.outcome) for a in await store.job_attempts(Q, "j1")] == [
        (1, "succeeded"), (1, "late_response")]
    assert row.id == row_id


async def _late_rows(store: Store, clock: FakeClock, key: str, attempt: int | None,
                     count: int) -> list[InboxRow]:
    """``count`` new responses for ``key`` (distinct bodies), oldest first."""
    ids = set(await store.inbox_insert_many(
        [Response(correlation_key=key, attempt=attempt, result=n) for n in range(count)],
        now=clock.now()))
    return [r for r in await store.inbox_pending_for_keys([key]) if r.id in ids]


async def _two_tries(store: Store, clock: FakeClock, job_id: str) -> None:
    """A job whose first try timed out (re-queued) and whose second one succeeded."""
    [job] = await start(store, clock, make_job(clock, job_id))
    await store.persist_batch(changes=[Change(
        kind=ChangeKind.REQUEUE, queue=Q, id=job_id, attempt=1, run_at=clock.now(),
        outcome="timeout", launched_at=job.launched_at,
        correlation_key=job.correlation_key)], owner=OWNER, now=clock.now())
    [again] = await store.job_mark_running_many(queue=Q, ids=[job_id], now=clock.now(),
                                                owner=OWNER, heartbeat_seconds=None)
    await store.persist_batch(changes=[archive(again)], owner=OWNER, now=clock.now())


def _late_by_try(attempts: list[Attempt]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for a in attempts:
        if a.outcome == "late_response":
            counts[a.attempt] = counts.get(a.attempt, 0) + 1
    return counts


async def test_late_responses_are_bounded_per_try(store: Store, clock: FakeClock) -> None:
    """At most 10 late responses are recorded per try, within one call and across
    calls; a response without an attempt number counts for the try of its key."""
    await _two_tries(store, clock, "j1")
    first = await _late_rows(store, clock, "~tok-j1.1", 1, 14)
    second = await _late_rows(store, clock, "~tok-j1.2", 2, 4)
    await store.attempt_record_late_many([(Q, "j1", r) for r in first + second],
                                         now=clock.now())
    assert _late_by_try(await store.job_attempts(Q, "j1")) == {1: 10, 2: 4}

    second = await _late_rows(store, clock, "~tok-j1.2", None, 9)  # no attempt number
    first = await _late_rows(store, clock, "~tok-j1.1", 1, 3)
    for rows in (second[:5], second[5:] + first):
        await store.attempt_record_late_many([(Q, "j1", r) for r in rows], now=clock.now())
    attempts = await store.job_attempts(Q, "j1")
    assert _late_by_try(attempts) == {1: 10, 2: 10}
    kept = [a.response["result"] for a in attempts
            if (a.attempt, a.outcome) == (1, "late_response")]
    assert kept == list(range(10))  # the first ones, in order


async def test_late_responses_recorded_at_once_on_one_store_stay_bounded(
        store: Store, clock: FakeClock) -> None:
    """Calls of one store recording late responses for the same try at the same time
    (on several pooled connections, where the driver has them) record at most 10."""
    [job] = await start(store, clock, make_job(clock, "j1"))
    await store.persist_batch(changes=[archive(job)], owner=OWNER, now=clock.now())
    rows = await _late_rows(store, clock, "~tok-j1.1", 1, 24)
    await asyncio.gather(*(store.attempt_record_late_many([(Q, "j1", row)], now=clock.now())
                           for row in rows))
    assert _late_by_try(await store.job_attempts(Q, "j1")) == {1: 10}


@pytest.mark.sql_only  # a second store on the same database
async def test_late_responses_recorded_at_once_stay_bounded(store: Store,
                                                            clock: FakeClock) -> None:
    """Two processes recording late responses for the same try at the same time
    (each on several connections) record at most 10 between them."""
    [job] = await start(store, clock, make_job(clock, "j1"))
    await store.persist_batch(changes=[archive(job)], owner=OWNER, now=clock.now())
    rows = await _late_rows(store, clock, "~tok-j1.1", 1, 24)
    other = await open_store(store.engine.url.render_as_string(hide_password=False))
    try:
        await asyncio.gather(*(
            (store, other)[n % 2].attempt_record_late_many([(Q, "j1", row)], now=clock.now())
            for n, row in enumerate(rows)))
    finally:
        await other.close()
    assert _late_by_try(await store.job_attempts(Q, "j1")) == {1: 10}


async def test_job_history_is_its_last_entries_and_their_count(store: Store,
                                                               clock: FakeClock) -> None:
    await _two_tries(store, clock, "j1")
    late = await _late_rows(store, clock, "~tok-j1.1", 1, 4)
    await store.attempt_record_late_many([(Q, "j1", r) for r in late], now=clock.advance(1))
    everything = await store.job_attempts(Q, "j1")
    assert [(a.attempt, a.outcome) for a in everything] == [
        (1, "timeout"), *[(1, "late_response")] * 4, (2, "succeeded")]

    def shown(attempts: list[Attempt]) -> list[tuple[Any, ...]]:
        return [(a.attempt, a.outcome, a.launched_at, a.finished_at, a.error)
                for a in attempts]

    last = await store.job_history(Q, "j1", limit=3)
    assert (shown(last.tries), last.total) == (shown(everything[-3:]), 6)
    whole = await store.job_history(Q, "j1", limit=50)
    assert (shown(whole.tries), whole.total) == (shown(everything), 6)
    none = await store.job_history(Q, "missing", limit=50)
    assert (none.tries, none.total) == ([], 0)


async def test_reschedule_moves_only_queued_jobs(store: Store, clock: FakeClock) -> None:
    await start(store, clock, make_job(clock, "running"))
    await insert(store, make_job(clock, "a"), make_job(clock, "b"), make_job(clock, "c"))
    run_ats = {"a": clock.now() + timedelta(minutes=5), "b": clock.now() + timedelta(hours=2),
               "running": clock.now() + timedelta(minutes=5)}

    assert await store.job_reschedule_many(queue=Q, run_ats=run_ats, now=clock.now()) == 2
    assert (await get(store, "a")).run_at == run_ats["a"]
    assert (await get(store, "b")).run_at == run_ats["b"]
    assert (await get(store, "c")).run_at == clock.now()
    assert (await get(store, "running")).run_at == clock.now()


async def test_adopt_running_jobs(store: Store, clock: FakeClock) -> None:
    [job] = await start(store, clock, make_job(clock, "j1"))
    await insert(store, make_job(clock, "queued"))

    assert [j.id for j in await store.job_load_running(queue=Q)] == ["j1"]
    assert await store.job_adopt_running(queue=Q, owner=OTHER, now=clock.now()) == 1
    assert await store.persist_batch(changes=[archive(job)], owner=OWNER, now=clock.now()) == set()
    assert await store.persist_batch(changes=[archive(job)], owner=OTHER,
                                     now=clock.now()) == {(Q, "j1")}


async def test_running_jobs_are_read_by_page_and_by_id(store: Store, clock: FakeClock) -> None:
    await start(store, clock, *(make_job(clock, f"r{i}") for i in range(5)))
    await insert(store, make_job(clock, "queued"))
    await start(store, clock, make_job(clock, "elsewhere", queue="other"))

    first = await store.job_load_running(queue=Q, limit=2)
    rest = await store.job_load_running(queue=Q, after_id=first[-1].id, limit=10)
    assert [j.id for j in first + rest] == ["r0", "r1", "r2", "r3", "r4"]
    assert first[0].data == {"n": "r0"}  # whole jobs, as stored
    some = await store.job_load_running(queue=Q, ids=["r3", "queued", "r1", "nope"])
    assert sorted(j.id for j in some) == ["r1", "r3"]
    assert await store.job_load_running(queue=Q, ids=[]) == []


async def test_an_adoption_takes_every_running_job_of_the_queue(
        store: Store, clock: FakeClock) -> None:
    await start(store, clock, make_job(clock, "r0"), make_job(clock, "r1"))
    await insert(store, make_job(clock, "queued"))
    await start(store, clock, make_job(clock, "elsewhere", queue="other"))

    assert await store.job_adopt_running(queue=Q, owner=OTHER, now=clock.now()) == 2
    assert {j.owner for j in await store.job_load_running(queue=Q)} == {OTHER}
    assert (await get(store, "queued")).owner is None
    [other] = await store.job_load_running(queue="other")
    assert other.owner == OWNER


async def test_pending_rows_come_back_whole(store: Store, clock: FakeClock) -> None:
    [row_id] = await store.inbox_insert_many([Response(
        correlation_key="k", status="failed", attempt=2, retryable=False,
        result={"partial": [1, 2]}, error={"kind": "boom", "detail": "x"}, extend_seconds=5.5,
        source="kafka", token="tok-1")], now=clock.now())
    [row] = (await store.inbox_pending_scan(after_id=0, before=clock.advance(1), limit=10)).rows
    assert (row.id, row.correlation_key, row.status, row.attempt, row.retryable) == (
        row_id, "k", "failed", 2, False)
    assert (row.result, row.error) == ({"partial": [1, 2]}, {"kind": "boom", "detail": "x"})
    assert (row.extend_seconds, row.source, row.token) == (5.5, "kafka", "tok-1")
    assert row.received_at == clock.now() - timedelta(seconds=1)


async def test_meta_get_or_set_keeps_the_first_value(store: Store) -> None:
    assert await store.meta_get_or_set("instance", "one") == "one"
    assert await store.meta_get_or_set("instance", "two") == "one"


# -- merging queues -----------------------------------------------------------------------


def merging_job(clock: FakeClock, job_id: str, payload: str, *, key: str = "k",
                body_hash: str | None = None) -> Job:
    return make_job(clock, job_id, ordering_key=key, key_order_at=clock.now(),
                    data={"payloads": [payload]}, body_hash=body_hash or f"hash-{job_id}")


async def test_merge_appends_to_the_queued_job_of_the_key(store: Store, clock: FakeClock) -> None:
    first = await store.job_merge(merging_job(clock, "m1", "a"))
    assert first.status is InsertStatus.CREATED
    second = await store.job_merge(merging_job(clock, "m2", "b"))

    assert second.status is InsertStatus.CREATED
    assert second.job is not None
    assert (second.job.id, second.job.data["payloads"]) == ("m1", ["a", "b"])
    assert (await get(store, "m1")).data["payloads"] == ["a", "b"]
    assert (await get(store, "m2")).id == "m1"  # a merged id answers with its holder
    other = await store.job_merge(merging_job(clock, "o1", "c", key="other"))
    assert other.status is InsertStatus.CREATED
    assert (await get(store, "o1")).data["payloads"] == ["c"]


async def test_merge_is_idempotent_per_job_id(store: Store, clock: FakeClock) -> None:
    await store.job_merge(merging_job(clock, "m1", "a"))
    await store.job_merge(merging_job(clock, "m2", "b"))

    again = await store.job_merge(merging_job(clock, "m2", "b"))
    assert again.status is InsertStatus.EXISTS
    assert again.job is not None
    assert again.job.data["payloads"] == ["a", "b"]
    changed = await store.job_merge(merging_job(clock, "m2", "x", body_hash="another"))
    assert changed.status is InsertStatus.CONFLICT
    assert (await store.job_merge(merging_job(clock, "m1", "a"))).status is InsertStatus.EXISTS
    assert (await get(store, "m1")).data["payloads"] == ["a", "b"]


async def test_merge_never_joins_a_launched_job(store: Store, clock: FakeClock) -> None:
    await store.job_merge(merging_job(clock, "m1", "a"))
    await store.job_mark_running_many(queue=Q, ids=["m1"], now=clock.now(), owner=OWNER,
                                      heartbeat_seconds=None)

    outcome = await store.job_merge(merging_job(clock, "m2", "b"))
    assert outcome.status is InsertStatus.CREATED
    assert outcome.job is not None
    assert outcome.job.id == "m2"
    assert (await get(store, "m1")).data["payloads"] == ["a"]


# -- rate-limit launch events -------------------------------------------------------------


async def test_claims_record_launch_events_of_their_rate_group(store: Store,
                                                              clock: FakeClock) -> None:
    t0 = clock.now()
    await insert(store, *(make_job(clock, f"j{i}") for i in range(3)))
    await store.job_mark_running_many(queue=Q, ids=["j0", "j1", "j2"], now=t0, owner=OWNER,
                                      heartbeat_seconds=None,
                                      rate_groups={"j0": "g1", "j1": "g2", "gone": "g1"})
    t1 = clock.advance(10)
    await insert(store, make_job(clock, "j3"))
    await store.job_mark_running_many(queue=Q, ids=["j3"], now=t1, owner=OWNER,
                                      heartbeat_seconds=None, rate_groups={"j3": "g1"})

    recent = await store.launch_events_recent(queue=Q, since=t0 - timedelta(seconds=1))
    assert {group: sorted(times) for group, times in recent.items()} == {
        "g1": [t0, t1], "g2": [t0]}
    assert await store.launch_events_recent(queue="other", since=t0 - timedelta(seconds=1)) == {}
    assert await store.launch_events_recent(queue=Q, since=t0) == {"g1": [t1]}
    # events at or before ``since`` were deleted by the previous call
    assert await store.launch_events_recent(queue=Q, since=t0 - timedelta(seconds=1)) == {
        "g1": [t1]}


# -- leases -------------------------------------------------------------------------------


async def test_lease_acquire(store: Store, clock: FakeClock) -> None:
    held = await store.lease_acquire_many(queues=["a", "b"], owner=OWNER, now=clock.now(),
                                          seconds=30)
    assert held == {"a", "b"}
    taken = await store.lease_acquire_many(queues=["a", "c"], owner=OTHER, now=clock.now(),
                                           seconds=30)
    assert taken == {"c"}


async def test_lease_renewal_keeps_it(store: Store, clock: FakeClock) -> None:
    await store.lease_acquire_many(queues=["a"], owner=OWNER, now=clock.now(), seconds=30)
    clock.advance(20)
    assert await store.lease_acquire_many(queues=["a"], owner=OWNER, now=clock.now(),
                                          seconds=30) == {"a"}
    clock.advance(20)  # 40 s after the first lease, 20 s after the renewal
    assert await store.lease_acquire_many(queues=["a"], owner=OTHER, now=clock.now(),
                                          seconds=30) == set()


async def test_lease_taken_over_after_expiry(store: Store, clock: FakeClock) -> None:
    await store.lease_acquire_many(queues=["a"], owner=OWNER, now=clock.now(), seconds=30)
    clock.advance(31)

    assert await store.lease_acquire_many(queues=["a"], owner=OTHER, now=clock.now(),
                                          seconds=30) == {"a"}
    assert await store.lease_acquire_many(queues=["a"], owner=OWNER, now=clock.now(),
                                          seconds=30) == set()


async def test_lease_release_all(store: Store, clock: FakeClock) -> None:
    await store.lease_acquire_many(queues=["a", "b"], owner=OWNER, now=clock.now(), seconds=30)

    assert await store.lease_release_all(owner=OWNER) == 2
    assert await store.lease_acquire_many(queues=["a"], owner=OTHER, now=clock.now(),
                                          seconds=30) == {"a"}


async def test_lease_release_many_only_the_owners(store: Store, clock: FakeClock) -> None:
    await store.lease_acquire_many(queues=["a", "b"], owner=OWNER, now=clock.now(), seconds=30)
    await store.lease_acquire_many(queues=["c"], owner=OTHER, now=clock.now(), seconds=30)

    assert await store.lease_release_many(queues=["a", "c"], owner=OWNER) == 1
    assert await store.lease_release_many(queues=[], owner=OWNER) == 0
    leases = await store.lease_list()
    assert {q: owner for q, (owner, _) in leases.items()} == {"b": OWNER, "c": OTHER}
    assert leases["b"][1] == clock.now() + timedelta(seconds=30)
    assert await store.lease_acquire_many(queues=["a"], owner=OTHER, now=clock.now(),
                                          seconds=30) == {"a"}


# -- membership ---------------------------------------------------------------------------


async def test_daemon_heartbeat_lists_the_live(store: Store, clock: FakeClock) -> None:
    assert await store.daemon_heartbeat(owner=OWNER, now=clock.now(), seconds=10) == [OWNER]
    clock.advance(5)
    assert await store.daemon_heartbeat(owner=OTHER, now=clock.now(), seconds=10) == sorted(
        [OWNER, OTHER])
    clock.advance(6)  # OWNER's heartbeat is 11 s old: no longer live
    assert await store.daemon_heartbeat(owner=OTHER, now=clock.now(), seconds=10) == [OTHER]
    # a renewal brings it back
    assert await store.daemon_heartbeat(owner=OWNER, now=clock.now(), seconds=10) == sorted(
        [OWNER, OTHER])


async def test_daemon_leave(store: Store, clock: FakeClock) -> None:
    await store.daemon_heartbeat(owner=OWNER, now=clock.now(), seconds=10)
    await store.daemon_leave(owner=OWNER)
    await store.daemon_leave(owner="nobody")  # no such daemon: nothing happens
    assert await store.daemon_heartbeat(owner=OTHER, now=clock.now(), seconds=10) == [OTHER]


# -- stats and pruning ------------------------------------------------------------------


async def test_queue_stats(store: Store, clock: FakeClock) -> None:
    t0 = clock.now()
    await store.queue_upsert({"id": Q, "concurrency": 10}, now=t0)
    await store.queue_upsert({"id": "idle", "paused": True}, now=t0)
    await start(store, clock, make_job(clock, "r1", weight=2), make_job(clock, "r2", weight=3))
    await insert(store, make_job(clock, "due-old", run_at=t0 - timedelta(seconds=40)),
                 make_job(clock, "due", run_at=t0),
                 make_job(clock, "future", run_at=t0 + timedelta(hours=1)))

    stats = {s.queue: s for s in await store.queue_stats(now=t0 + timedelta(seconds=20))}

    q = stats[Q]
    assert (q.paused, q.queued, q.due, q.running, q.running_weight, q.concurrency) == (
        False, 3, 2, 2, 5, 10)
    assert q.oldest_due_age_seconds == pytest.approx(60.0)
    idle = stats["idle"]
    assert (idle.paused, idle.queued, idle.due, idle.running, idle.running_weight,
            idle.oldest_due_age_seconds) == (True, 0, 0, 0, 0, None)


async def test_archive_prune(store: Store, clock: FakeClock) -> None:
    jobs = await start(store, clock, make_job(clock, "old-1"), make_job(clock, "old-2"),
                       make_job(clock, "new"))
    await store.persist_batch(changes=[archive(j) for j in jobs[:2]], owner=OWNER,
                              now=clock.now())
    cutoff = clock.advance(3600)
    await store.persist_batch(changes=[archive(jobs[2])], owner=OWNER, now=clock.advance(1))

    assert await store.archive_prune(before=cutoff, limit=1) == 1
    assert await store.archive_prune(before=cutoff, limit=10) == 1
    assert await store.archive_prune(before=cutoff, limit=10) == 0

    for job_id in ("old-1", "old-2"):
        assert await store.job_get(Q, job_id) is None
        assert await store.job_attempts(Q, job_id) == []
    assert (await get(store, "new")).status is JobState.SUCCEEDED
    assert len(await store.job_attempts(Q, "new")) == 1


async def test_archive_prune_bounds_the_inbox_on_its_own(store: Store,
                                                         clock: FakeClock) -> None:
    ids = await store.inbox_insert_many([Response(correlation_key=f"k{n}") for n in range(5)],
                                        now=clock.now())
    await store.inbox_mark_many([(i, InboxOutcome.UNMATCHED) for i in ids if i is not None],
                                now=clock.now())
    cutoff = clock.advance(3600)
    # no archived job is old enough: the applied inbox rows go anyway, a batch at a time
    assert await store.archive_prune(before=cutoff, limit=2) == 2
    assert await store.archive_prune(before=cutoff, limit=2) == 2
    assert await store.archive_prune(before=cutoff, limit=2) == 1
    assert await store.archive_prune(before=cutoff, limit=2) == 0
    assert await store.inbox_counts() == {}


async def test_inbox_counts_by_outcome(store: Store, clock: FakeClock) -> None:
    assert await store.inbox_counts() == {}
    ids = await store.inbox_insert_many([Response(correlation_key=f"k{i}") for i in range(4)],
                                        now=clock.now())
    await store.inbox_mark_many([(ids[0], InboxOutcome.STALE), (ids[1], InboxOutcome.LATE)],
                                now=clock.now())
    await store.inbox_mark_many([(ids[0], InboxOutcome.APPLIED)], now=clock.now())

    assert await store.inbox_counts() == {"pending": 2, "stale": 1, "late": 1}


async def test_ping(store: Store) -> None:
    await store.ping()


# -- PostgreSQL row locks ------------------------------------------------------------------


async def test_claims_at_once_on_one_store_never_share_a_job(store: Store,
                                                              clock: FakeClock) -> None:
    """Claims of one store at the same time (on several pooled connections, where the
    driver has them; one at a time otherwise) claim each job once."""
    ids = [f"j{i:03d}" for i in range(60)]
    await insert(store, *(make_job(clock, i) for i in ids))
    claims = await asyncio.gather(*(
        store.job_mark_running_many(queue=Q, ids=ids[n % 3::2], now=clock.now(),
                                    owner=f"o{n}", heartbeat_seconds=None)
        for n in range(6)))
    claimed = [j.id for jobs in claims for j in jobs]
    assert sorted(claimed) == ids  # each once
    running = await store.job_load_running(queue=Q)
    assert {j.id: j.owner for j in running} == {
        j.id: j.owner for jobs in claims for j in jobs}


async def test_concurrent_claims_never_share_a_job(store: Store, clock: FakeClock) -> None:
    if not store.supports_row_locks:
        pytest.skip("a single writer: claims cannot race")
    ids = [f"j{i:03d}" for i in range(200)]
    await insert(store, *(make_job(clock, i) for i in ids))
    other = await open_store(store.engine.url.render_as_string(hide_password=False))
    owners: dict[str, str] = {}
    try:
        for round_ids in (ids[:100], ids[100:]):
            a, b = await asyncio.gather(*(
                s.job_mark_running_many(queue=Q, ids=round_ids, now=clock.now(), owner=owner,
                                        heartbeat_seconds=None)
                for s, owner in ((store, OWNER), (other, OTHER))))
            claimed_a, claimed_b = {j.id for j in a}, {j.id for j in b}
            assert not claimed_a & claimed_b
            assert claimed_a | claimed_b == set(round_ids)
            owners |= dict.fromkeys(claimed_a, OWNER) | dict.fromkeys(claimed_b, OTHER)
    finally:
        await other.close()
    running = await store.job_load_running(queue=Q)
    assert {j.id: j.owner for j in running} == owners
    assert {j.attempt for j in running} == {1}


@pytest.mark.sql_only  # a database's connections
async def test_recovers_when_the_database_drops_its_connections(store: Store,
                                                                clock: FakeClock) -> None:
    """A database restart kills every pooled connection: a transaction may fail once
    with TransientStoreError (its caller retries), then the store reconnects, also
    for statements sent straight to the driver."""
    if store.dialect != "postgresql":
        pytest.skip("SQLite has no server connections")
    import asyncpg

    from hipq.errors import TransientStoreError

    jobs = [make_job(clock, f"r{i}") for i in range(4)]
    await insert(store, *jobs[:2])
    # fill the pool with several connections, then have the server drop them all
    await asyncio.gather(*(store.queue_list() for _ in range(5)))
    url = store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    admin = await asyncpg.connect(url)
    try:
        await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    finally:
        await admin.close()
    failures = 0
    for _ in range(3):
        try:
            await store.job_mark_running_many(queue=Q, ids=["r0", "r1"], now=clock.now(),
                                              owner=OWNER, heartbeat_seconds=None)
            break
        except TransientStoreError:
            failures += 1
    assert failures <= 1
    await insert(store, *jobs[2:])
    assert {j.id for j in await store.job_load_running(queue=Q)} == {"r0", "r1"}


# -- maintenance ------------------------------------------------------------------------


@pytest.mark.alone_on_server  # a database made meanwhile keeps the vacuum from removing rows
async def test_vacuum_clears_the_jobs_table_of_jobs_long_gone(store: Store,
                                                              clock: FakeClock) -> None:
    """PostgreSQL vacuums the hot table on request (the reconcile loop asks every
    ``reconcile.vacuum_every`` jobs); SQLite has nothing to do and says so."""
    running = await start(store, clock, *(make_job(clock, f"v{i}") for i in range(50)))
    await store.persist_batch(changes=[archive(j) for j in running], owner=OWNER,
                              now=clock.now())
    if store.dialect != "postgresql":
        assert await store.jobs_vacuum() is False
        return
    import asyncpg

    url = store.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(url)
    try:
        dead = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs'"
        count = "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'jobs'"
        before = await conn.fetchval(count)
        sent: list[str] = []
        store.add_query_logger(lambda query: sent.append(query.query))  # type: ignore[attr-defined]
        assert await store.jobs_vacuum() is True
        await asyncio.sleep(0)  # asyncpg calls loggers soon after the statement
        # no parallel workers: their start cost more than the small table's index pass
        assert [q for q in sent if "VACUUM" in q] == ["VACUUM (SKIP_LOCKED, PARALLEL 0) jobs"]
        for _ in range(50):  # statistics reach other sessions at their next snapshot
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            if await conn.fetchval(count) > before:
                break
            await asyncio.sleep(0.05)
        assert await conn.fetchval(count) == before + 1
        assert await conn.fetchval(dead) == 0
    finally:
        await conn.close()
    assert await store.job_get(Q, "v0") is not None  # archived, still there

"""The tick's plan, driven by hand (docs/internals.md, "The tick"): no database, no
executor, no event loop. Each step of :class:`hipq.engine.plan.TickPlan` is a
generator; here every request it yields gets an answer this test makes up (or an
error thrown in), and the test reads what it asked for, in order, and what it did to
the batch. The steps run in the order of the executor's stage table, one after the
other."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Generator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hipq.config import QueueConfig, ReconcileConfig
from hipq.engine.executor import TICK
from hipq.engine.launcher import LaunchResult
from hipq.engine.plan import TickPlan
from hipq.engine.reconciler import Reconciler
from hipq.engine.requests import (
    Alone,
    Answers,
    Archived,
    ArchiveRan,
    Call,
    Collect,
    HandOn,
    InTickRun,
    Launch,
    Moved,
    ReadDue,
    RunInTick,
    TakeAnswers,
    Together,
)
from hipq.engine.result import ReconcileResult
from hipq.errors import StoreConflict
from hipq.jobs import ErrorKind, Job, JobError, JobState
from hipq.store.records import ChangeKind, InboxPage, InboxRow, QueueRecord
from hipq.store.rows import queue_record
from hipq.targets import Completed, Targets
from hipq.testing import FakeClock, MemoryTarget

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


class NoStore:
    """A store no plan may touch: only the executor calls the store."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the plan touched the store ({name})")


class InTick(MemoryTarget):
    in_tick = True


def _name(request: Any) -> str:
    return request.method if isinstance(request, Call) else type(request).__name__


class World:
    """One queue ``q`` held by daemon ``o1``, its due jobs, and what the store and the
    launcher answer; each request the plan makes is noted in :attr:`asked`."""

    def __init__(self, *, target: MemoryTarget | None = None,
                 config: ReconcileConfig | None = None, **queue: Any) -> None:
        self.target = target or MemoryTarget()
        self.engine = Reconciler(NoStore(), clock=FakeClock(NOW), owner="o1",  # type: ignore[arg-type]
                                 config=config, targets=Targets(memory={"t": self.target}))
        config = QueueConfig(id="q", target={"kind": "memory", "name": "t"}, **queue)
        self.record = queue_record({"config": config.stored(), "paused": False,
                                    "created_at": NOW, "updated_at": NOW})
        self.now = NOW
        self.due: list[Job] = []  # what the next ReadDue finds
        self.stored: dict[str, Job] = {}  # the jobs by id, as the store has them
        self.inbox: list[InboxRow] = []  # what the next read of new inbox rows finds
        self.outcomes: list[LaunchResult] = []  # what launches said since the last tick
        self.asked: list[str] = []
        self.requests: list[Any] = []
        self.launched: list[Job] = []
        self.answers: dict[str, Callable[[Any], Any]] = {}  # a test's own, by name

    def enqueue(self, *ids: str) -> list[Job]:
        jobs = [Job(id=i, queue="q", run_at=NOW, created_at=NOW, updated_at=NOW,
                    max_attempts=3, token=secrets.token_hex(16)) for i in ids]
        self.stored.update((j.id, j) for j in jobs)
        self.due.extend(jobs)
        return jobs

    # -- driving -------------------------------------------------------------------------

    def tick(self) -> ReconcileResult:
        """One tick: the plan's steps in the order of the executor's stages."""
        plan = TickPlan(self.engine, self.now)
        for stage in TICK:
            for lane in stage:
                for step in lane:
                    self.run(getattr(plan, step)())
        assert plan.result is not None
        return plan.result

    def run(self, plan: Generator[Any, Any, Any]) -> Any:
        answer: Any = None
        error: Exception | None = None
        while True:
            try:
                request = plan.send(answer) if error is None else plan.throw(error)
            except StopIteration as stop:
                return stop.value
            try:
                answer, error = self.answer(request), None
            except Exception as exc:
                answer, error = None, exc

    def answer(self, request: Any) -> Any:
        if isinstance(request, Generator):
            return self.run(request)
        if isinstance(request, Alone):
            return self.run(request.plan)
        if isinstance(request, Together):
            return [self.answer(part) for part in request.parts]
        name = _name(request)
        self.asked.append(name)
        self.requests.append(request)
        if name in self.answers:
            return self.answers[name](request)
        return getattr(self, f"_{name}")(request)

    # -- the store -------------------------------------------------------------------------

    def _queue_list(self, _: Call) -> list[QueueRecord]:
        return [self.record]

    def _daemon_heartbeat(self, _: Call) -> list[str]:
        return ["o1"]

    def _lease_list(self, _: Call) -> dict[str, Any]:
        return {}

    def _lease_acquire_many(self, call: Call) -> set[str]:
        return set(call.kwargs["queues"])

    def _job_adopt_running(self, _: Call) -> int:
        return 0

    def _backoff_list(self, _: Call) -> list[Any]:
        return []

    def _queue_state_list(self, _: Call) -> dict[str, Any]:
        return {}

    def _queue_state_save(self, _: Call) -> None:
        return None

    def _inbox_pending_scan(self, call: Call) -> InboxPage:
        rows = [r for r in self.inbox if r.id > call.kwargs["after_id"]]
        return InboxPage(rows=rows, more=False)

    def _inbox_mark_many(self, _: Call) -> None:
        return None

    def _job_keys_lookup(self, _: Call) -> dict[str, Job]:
        return {}

    def _archived_by_attempt_keys(self, _: Call) -> dict[str, Any]:
        return {}

    def _attempt_record_late_many(self, _: Call) -> None:
        return None

    def _job_expired_sweep(self, _: Call) -> list[Job]:
        return []

    def _job_load_running(self, call: Call) -> list[Job]:
        return [self.stored[i] for i in call.kwargs.get("ids") or () if i in self.stored]

    def _job_mark_running_many(self, call: Call) -> list[Job]:
        claimed = []
        for job_id in call.kwargs["ids"]:
            job = self.stored[job_id]
            attempt = job.attempt + 1
            job = self.stored[job_id] = replace(
                job, status=JobState.RUNNING, attempt=attempt, launched_at=self.now,
                deadline=self.now + timedelta(seconds=job.timeout_seconds), owner="o1",
                correlation_key=f"~{job.token}.{attempt}")
            claimed.append(job)
        self.due = [j for j in self.due if j.id not in call.kwargs["ids"]]
        return claimed

    def _job_archive_queued_many(self, call: Call) -> list[Job]:
        return [self.stored.pop(i) for i in call.kwargs["ends"] if i in self.stored]

    def _persist_batch(self, call: Call) -> set[tuple[str, str]]:
        for change in call.kwargs["changes"]:
            if change.kind is ChangeKind.REQUEUE:
                self.stored[change.id] = replace(self.stored[change.id], status=JobState.QUEUED)
        return {(c.queue, c.id) for c in call.kwargs["changes"]}

    # -- the executor's own requests ---------------------------------------------------------

    def _ReadDue(self, _: ReadDue) -> list[Job]:
        return list(self.due)

    def _TakeAnswers(self, _: TakeAnswers) -> Answers:
        outcomes, self.outcomes = self.outcomes, []
        return Answers(spent=[], outcomes=outcomes)

    def _Launch(self, request: Launch) -> None:
        self.launched.extend(job for _, job in request.launches)

    def _RunInTick(self, request: RunInTick) -> InTickRun:
        return InTickRun(answered=[LaunchResult(job=t, outcome=Completed(status="succeeded"))
                                   for t in request.tries])

    def _ArchiveRan(self, request: ArchiveRan) -> Archived:
        return Archived(applied=frozenset((c.queue, c.id) for c in request.ends),
                        done=request.ends)

    def _HandOn(self, _: HandOn) -> None:
        return None

    def _Collect(self, _: Collect) -> list[Any]:
        return []

    def _Moved(self, _: Moved) -> None:
        return None


def test_a_quiet_tick_asks_in_step_order() -> None:
    world = World()
    result = world.tick()
    assert not result.changed
    assert world.asked == [
        "queue_list",  # step 0: the queues, then the leases (q is taken: nobody holds it)
        "daemon_heartbeat", "lease_list", "lease_acquire_many", "job_adopt_running",
        "backoff_list", "queue_state_list",  # the partner's word of the queue gained
        "TakeAnswers", "inbox_pending_scan",  # what launches and responses said
        "inbox_pending_scan", "job_expired_sweep",  # the sweep (once a second)
        "ReadDue",  # step 1 (steps 3, 4 and 5: nothing to do)
        "Collect", "queue_state_save", "Moved",  # the tick's end
    ]
    assert world.engine.held == {"q"}


def test_due_jobs_are_read_as_planned_claimed_held_and_launched() -> None:
    world = World(concurrency=5)
    world.enqueue("a", "b")
    result = world.tick()
    read = next(r for r in world.requests if isinstance(r, ReadDue))
    assert read.fetches[0].limit == 5  # bounded by the free capacity
    claim = next(r for r in world.requests if _name(r) == "job_mark_running_many")
    assert (claim.kwargs["ids"], claim.kwargs["owner"]) == (["a", "b"], "o1")
    assert world.asked.index("job_mark_running_many") < world.asked.index("Launch")
    assert [j.id for j in world.launched] == ["a", "b"]
    assert (result.fetched, result.launched) == (2, 2)
    assert sorted(world.engine.batch) == [("q", "a"), ("q", "b")]
    world.asked.clear()
    world.tick()  # they hold the capacity: the next read is planned for what is left
    read = [r for r in world.requests if isinstance(r, ReadDue)][-1]
    assert read.fetches[0].limit == 3


def test_a_response_ends_its_try_and_step_3_persists_it() -> None:
    world = World()
    world.enqueue("a")
    world.tick()
    key = world.stored["a"].correlation_key
    assert key is not None
    world.inbox.append(InboxRow(id=1, correlation_key=key, attempt=1, status="succeeded",
                                retryable=None, result={"ok": 1}, error=None,
                                extend_seconds=None, source="api", received_at=NOW))
    world.now += timedelta(seconds=1)
    world.requests.clear()
    result = world.tick()
    persist = next(r for r in world.requests if _name(r) == "persist_batch")
    (change,) = persist.kwargs["changes"]
    assert (change.kind, change.id, change.status, change.inbox_ids) == (
        ChangeKind.ARCHIVE, "a", "succeeded", (1,))
    assert (result.responses_applied, result.finished) == (1, 1)
    assert len(world.engine.batch) == 0  # persisted: it left the batch


def test_a_job_that_step_3_requeues_is_not_claimed_in_the_same_tick() -> None:
    world = World()
    world.enqueue("a")
    world.tick()
    world.tick()  # it waits through a tick: its job is let go
    held = world.stored["a"]
    error = JobError(kind=ErrorKind.TRANSPORT, detail="refused", retryable=True)
    world.outcomes.append(LaunchResult(job=held, outcome=None, error=error))
    world.due = [world.stored["a"], *world.enqueue("b")]  # a read may still see it due
    world.now += timedelta(seconds=1)
    world.asked.clear()
    world.requests.clear()
    result = world.tick()
    # its job was let go (it waited through a tick): read back for its retry strategy
    assert world.asked.index("job_load_running") < world.asked.index("persist_batch")
    persist = next(r for r in world.requests if _name(r) == "persist_batch")
    assert [c.kind for c in persist.kwargs["changes"]] == [ChangeKind.REQUEUE]
    claim = next(r for r in world.requests if _name(r) == "job_mark_running_many")
    assert claim.kwargs["ids"] == ["b"]
    assert (result.retried, result.launched) == (1, 1)


def test_tries_that_succeed_within_their_tick_are_archive_changes_never_claims() -> None:
    world = World(target=InTick(), config=ReconcileConfig(in_tick_seconds=0.5))
    world.enqueue("a", "b")
    result = world.tick()
    run = next(r for r in world.requests if isinstance(r, RunInTick))
    assert [t.id for t in run.tries] == ["a", "b"]
    assert all(t.attempt == 1 and t.owner == "o1" for t in run.tries)  # as claimed
    archive = next(r for r in world.requests if isinstance(r, ArchiveRan))
    assert [(c.kind, c.id, c.status) for c in archive.ends] == [
        (ChangeKind.ARCHIVE, "a", "succeeded"), (ChangeKind.ARCHIVE, "b", "succeeded")]
    assert archive.next_page is None  # the page was not full
    assert "job_mark_running_many" not in world.asked
    assert world.launched == []
    assert (result.launched, result.ran_inline, result.finished) == (2, 2, 2)
    assert len(world.engine.batch) == 0


def test_a_full_page_that_ran_in_its_tick_plans_the_next_read() -> None:
    world = World(target=InTick(), config=ReconcileConfig(in_tick_seconds=0.5,
                                                          fetch_limit=2))
    world.enqueue("a", "b", "c")
    world.due = world.due[:2]  # a full page
    world.tick()
    archive = next(r for r in world.requests if isinstance(r, ArchiveRan))
    assert isinstance(archive.next_page, ReadDue)
    assert [j.id for j in archive.ran] == ["a", "b"]  # read past these, in order


def test_a_claim_that_hits_a_taken_key_fails_that_job_alone() -> None:
    world = World()
    world.enqueue("a", "b")
    claim = world._job_mark_running_many

    def conflicting(call: Call) -> list[Job]:
        if "b" in call.kwargs["ids"]:
            raise StoreConflict("the key is taken")
        return claim(call)

    world.answers["job_mark_running_many"] = conflicting
    result = world.tick()
    claims = [r.kwargs["ids"] for r in world.requests if _name(r) == "job_mark_running_many"]
    assert claims == [["a", "b"], ["a"], ["b"]]  # together, then one by one
    failed = next(r for r in world.requests if _name(r) == "job_archive_queued_many")
    assert list(failed.kwargs["ends"]) == ["b"]
    assert failed.kwargs["ends"]["b"][0] == JobState.FAILED.value
    assert [j.id for j in world.launched] == ["a"]
    assert result.launched == 1


def test_an_error_the_plan_does_not_catch_ends_its_step() -> None:
    world = World()

    def down(_: Call) -> None:
        raise StoreConflict("no")

    world.answers["queue_list"] = down
    with pytest.raises(StoreConflict):
        world.tick()

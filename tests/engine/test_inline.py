"""Tries of an in-process target that end within their tick (hipq.engine.inline):
claimed and ended in one statement; anything else goes the usual way, with nothing
lost, launched twice or left behind in the batch."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hipq.config import QueueConfig, ReconcileConfig
from hipq.engine import Reconciler
from hipq.engine.inline import try_of
from hipq.jobs import Job, JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import ACCEPTED, Completed, LaunchOutcome, Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, history, job, queue, respond, tick


class InProcess(MemoryTarget):
    """A memory target that runs in process, as the Python target does."""

    in_tick = True


def reconciler_for(store: Store, clock: FakeClock, target: MemoryTarget,
                   **config: Any) -> Reconciler:
    return Reconciler(store, clock=clock, owner="o1", targets=Targets(memory={"t": target}),
                      config=ReconcileConfig(**config))


def succeeded(job: Job) -> LaunchOutcome:
    return Completed(status="succeeded", result={"echo": job.id, "attempt": job.attempt})


async def test_a_success_is_archived_in_the_tick_that_fetched_it(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    target = InProcess(succeeded)
    reconciler = reconciler_for(store, clock, target)
    await hipq.create_queue(queue())
    for i in range(5):
        await enqueue(hipq, f"j{i}", data={"i": i})

    result = await tick(reconciler)

    assert (result.launched, result.finished, result.ran_inline) == (5, 5, 5)
    assert len(result.ended) == 5
    assert target.ids() == [f"j{i}" for i in range(5)]
    for i in range(5):
        ended = await job(hipq, f"j{i}")
        assert ended.status is JobState.SUCCEEDED
        assert ended.result == {"echo": f"j{i}", "attempt": 1}
        assert (ended.attempt, ended.owner, ended.launch_confirmed) == (1, "o1", True)
        assert ended.correlation_key == f"~{ended.token}.1"
        [try_] = await history(hipq, f"j{i}")
        assert (try_.attempt, try_.outcome) == (1, "succeeded")
    assert len(reconciler.batch) == 0
    assert not reconciler.launcher.busy("q")
    assert (await tick(reconciler)).launched == 0  # nothing runs twice


async def test_the_function_sees_the_try(hipq: Hipq, store: Store, clock: FakeClock) -> None:
    """The job a function gets is the try as claimed: attempt, key, deadline, owner."""
    seen: list[Job] = []

    def record(job: Job) -> LaunchOutcome:
        seen.append(job)
        return succeeded(job)

    reconciler = reconciler_for(store, clock, InProcess(record))
    await hipq.create_queue(queue(timeout_seconds=120))
    await enqueue(hipq, "a")
    await tick(reconciler)
    [try_] = seen
    stored = await job(hipq, "a")
    assert try_.status is JobState.RUNNING
    assert (try_.attempt, try_.correlation_key, try_.deadline, try_.launched_at) == (
        stored.attempt, stored.correlation_key, stored.deadline, stored.launched_at)
    assert try_.deadline == clock.now() + (stored.deadline - stored.launched_at)


async def test_a_failed_try_is_claimed_and_retried_the_usual_way(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    target = InProcess(lambda job: Completed(status="failed", error={"why": "no"},
                                             retryable=True))
    reconciler = reconciler_for(store, clock, target)
    await hipq.create_queue(queue(attempts=3, retry={"strategy": "fixed", "delay_seconds": 10}))
    await enqueue(hipq, "a")

    first = await tick(reconciler)
    assert (first.launched, first.ran_inline) == (1, 0)
    running = await job(hipq, "a")
    assert (running.status, running.attempt) == (JobState.RUNNING, 1)

    second = await tick(reconciler)  # the answer, applied from the launcher
    assert second.retried == 1
    again = await job(hipq, "a")
    assert (again.status, again.attempt) == (JobState.QUEUED, 1)
    assert (again.run_at - clock.now()).total_seconds() == 10
    [try_] = await history(hipq, "a")
    assert try_.outcome == "response_failed"
    assert target.ids() == ["a"]
    assert not reconciler.launcher.busy("q")


async def test_an_accepted_try_waits_for_its_response(hipq: Hipq, store: Store,
                                                      clock: FakeClock) -> None:
    reconciler = reconciler_for(store, clock, InProcess(lambda job: ACCEPTED))
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    await tick(reconciler)
    running = await job(hipq, "a")
    assert running.status is JobState.RUNNING
    assert running.launch_confirmed  # a new owner after a crash waits for the response
    await respond(hipq, "a", status="succeeded", result={"late": True})
    await tick(reconciler)
    done = await job(hipq, "a")
    assert (done.status, done.result) == (JobState.SUCCEEDED, {"late": True})


async def test_a_function_still_running_at_the_end_of_the_wait_is_claimed(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    release = asyncio.Event()

    async def slow(job: Job) -> LaunchOutcome:
        await release.wait()
        return succeeded(job)

    target = InProcess(slow)
    reconciler = reconciler_for(store, clock, target, in_tick_seconds=0.05)
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")

    result = await reconciler.run_once()
    assert (result.launched, result.ran_inline) == (1, 0)
    running = await job(hipq, "a")
    assert (running.status, running.attempt) == (JobState.RUNNING, 1)
    assert reconciler.launcher.busy("q")  # a handover waits for its answer

    release.set()
    await reconciler.drain()
    assert (await tick(reconciler)).finished == 1
    done = await job(hipq, "a")
    assert (done.status, done.result) == (JobState.SUCCEEDED, {"echo": "a", "attempt": 1})
    assert target.ids() == ["a"]
    assert not reconciler.launcher.busy("q")


async def test_a_job_cancelled_while_its_function_runs_stays_cancelled(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    async def cancelled_meanwhile(job: Job) -> LaunchOutcome:
        await hipq.cancel(job.queue, job.id)
        return succeeded(job)

    reconciler = reconciler_for(store, clock, InProcess(cancelled_meanwhile))
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    result = await tick(reconciler)
    assert result.ran_inline == 0
    assert (await job(hipq, "a")).status is JobState.CANCELLED
    assert await history(hipq, "a") == []
    assert len(reconciler.batch) == 0


@pytest.mark.parametrize("settings", [
    {"delivery_strategy": "at_most_once"},
    {"rate_limit": {"launches": 100, "per_seconds": 1}},
    {"adaptive": {"min": 1}},
])
async def test_queues_that_must_see_each_launch_claim_first(
        hipq: Hipq, store: Store, clock: FakeClock, settings: dict[str, Any]) -> None:
    """An at-most-once queue never re-sends (so never runs before its claim), nor
    does a queue whose launches count (rate limit) or tell the partner's word."""
    statuses: list[JobState] = []

    async def look(job: Job) -> LaunchOutcome:
        stored = await store.job_get(job.queue, job.id)
        assert stored is not None
        statuses.append(stored.status)
        return succeeded(job)

    reconciler = reconciler_for(store, clock, InProcess(look))
    await hipq.create_queue(queue(concurrency=10, **settings))
    await enqueue(hipq, "a")
    assert (await tick(reconciler)).ran_inline == 0
    assert statuses == [JobState.RUNNING]
    await tick(reconciler)
    assert (await job(hipq, "a")).status is JobState.SUCCEEDED


async def test_no_wait_means_the_usual_path(hipq: Hipq, store: Store,
                                            clock: FakeClock) -> None:
    reconciler = reconciler_for(store, clock, InProcess(succeeded), in_tick_seconds=0)
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    assert (await tick(reconciler)).ran_inline == 0
    assert (await job(hipq, "a")).status is JobState.RUNNING
    await tick(reconciler)
    assert (await job(hipq, "a")).status is JobState.SUCCEEDED


async def test_capacity_holds_across_in_tick_runs(hipq: Hipq, store: Store,
                                                  clock: FakeClock) -> None:
    running = 0
    most = 0

    async def counted(job: Job) -> LaunchOutcome:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0)  # let the others start
        running -= 1
        return succeeded(job)

    reconciler = reconciler_for(store, clock, InProcess(counted))
    await hipq.create_queue(queue(concurrency=2))
    for i in range(5):
        await enqueue(hipq, f"j{i}")
    launched = [(await tick(reconciler)).ran_inline for _ in range(4)]
    assert launched == [2, 2, 1, 0]
    assert most == 2


async def scribble_and_fail(job: Job) -> None:
    """A Python target function that changes the job it got, then fails."""
    job.data["n"] = "changed"
    job.data.setdefault("added", []).append(1)
    raise RuntimeError("no")


async def scribble_and_succeed(job: Job) -> dict[str, Any]:
    job.data["n"] = "changed"
    return {"saw": job.attempt}


@pytest.mark.parametrize("function", ["scribble_and_fail", "scribble_and_succeed"])
async def test_a_function_changes_only_its_own_copy(hipq: Hipq, store: Store, clock: FakeClock,
                                                    function: str) -> None:
    """The Python target runs the try as its own deep copy (one copy, not two): what
    the function does to it reaches neither the stored job nor its retry."""
    reconciler = reconciler_for(store, clock, MemoryTarget())
    await hipq.create_queue(QueueConfig(id="q", target={
        "kind": "python", "function": f"tests.engine.test_inline:{function}", "in_tick": True},
        attempts=3, retry={"strategy": "fixed", "delay_seconds": 1}))
    await enqueue(hipq, "a", data={"n": 1})
    await tick(reconciler)
    await tick(reconciler)
    stored = await job(hipq, "a")
    assert stored.data == {"n": 1}
    if function == "scribble_and_succeed":
        assert (stored.status, stored.result) == (JobState.SUCCEEDED, {"saw": 1})
    else:
        assert (stored.status, stored.attempt) == (JobState.QUEUED, 1)


def test_a_try_is_a_deep_copy_of_the_fetched_job(clock: FakeClock) -> None:
    fetched = Job(id="a", queue="q", data={"n": [1, {"m": 2}]}, result={"r": [1]},
                  error={"e": {"f": 1}}, time_windows=[{"start": "09:00", "end": "17:00"}],
                  run_at=clock.now(), created_at=clock.now(), updated_at=clock.now(),
                  token="tok", body_hash="h", timeout_seconds=60)
    try_ = try_of(fetched, now=clock.now(), owner="o1", heartbeat_seconds=None)
    for name in ("data", "result", "error", "time_windows"):
        assert getattr(try_, name) == getattr(fetched, name)
        assert getattr(try_, name) is not getattr(fetched, name)
    try_.data["n"][1]["m"] = "changed"
    assert fetched.data == {"n": [1, {"m": 2}]}


async def test_a_python_target_claims_first_unless_it_opts_in(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    reconciler = reconciler_for(store, clock, MemoryTarget())
    await hipq.create_queue(QueueConfig(id="q", target={
        "kind": "python", "function": "tests.engine.test_inline:scribble_and_succeed"}))
    await enqueue(hipq, "a", data={"n": 1})
    assert (await tick(reconciler)).ran_inline == 0
    assert (await job(hipq, "a")).status is JobState.RUNNING
    await tick(reconciler)
    assert (await job(hipq, "a")).status is JobState.SUCCEEDED


async def test_a_large_tick_ends_its_tries_in_several_statements(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    """Ends of a tick go in statements of IN_TICK_ARCHIVE_CHUNK, side by side: each
    applies on its own, none is lost or applied twice."""
    from hipq.bodies import BatchItem
    from hipq.engine.executor import IN_TICK_ARCHIVE_CHUNK

    count = IN_TICK_ARCHIVE_CHUNK + 7  # two statements (a tick fetches at most 2,000)
    reconciler = reconciler_for(store, clock, InProcess(succeeded))
    await hipq.create_queue(queue())
    await hipq.enqueue_many("q", [(f"j{i:05d}", BatchItem(id=f"j{i:05d}", data={"i": i}))
                                  for i in range(count)])
    result = await tick(reconciler)
    assert (result.ran_inline, result.finished) == (count, count)
    assert len({c.id for c in result.ended}) == count
    assert (await tick(reconciler)).launched == 0
    for i in (0, IN_TICK_ARCHIVE_CHUNK, count - 1):
        assert (await job(hipq, f"j{i:05d}")).status is JobState.SUCCEEDED


async def test_a_partner_that_answers_429_is_heard_and_waits(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    """A throttled answer within the tick goes the usual way: the try is given back
    (no attempt spent), the queue pauses, nothing runs in the tick meanwhile, and the
    job succeeds once the pause is over."""
    from datetime import timedelta

    answers = iter(["throttled", "succeeded"])

    def partner(job: Job) -> LaunchOutcome:
        if next(answers) == "throttled":
            return Completed(status="throttled", kind="throttled",
                             error={"detail": "HTTP 429", "status": 429, "retry_after": 4})
        return succeeded(job)

    reconciler = reconciler_for(store, clock, InProcess(partner))
    await hipq.create_queue(queue(attempts=1))
    await enqueue(hipq, "a")
    assert (await tick(reconciler)).ran_inline == 0  # claimed, its answer the usual way
    assert (await tick(reconciler)).throttled == 1
    given_back = await job(hipq, "a")
    assert (given_back.status, given_back.attempt) == (JobState.QUEUED, 0)
    assert given_back.run_at == clock.now() + timedelta(seconds=4)
    assert (await tick(reconciler)).launched == 0  # paused
    clock.advance(4)
    assert (await tick(reconciler)).launched == 1
    await tick(reconciler)
    done = await job(hipq, "a")
    assert (done.status, done.attempt) == (JobState.SUCCEEDED, 1)
    assert [t.outcome for t in await history(hipq, "a")] == ["throttled", "succeeded"]


async def test_a_second_daemon_takes_the_queue_and_runs_each_job_once(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    """Two daemons on one database: the lease holder runs the jobs in its ticks; when
    it dies its queue goes to the other, which runs the rest; no job runs twice."""
    first_target, second_target = InProcess(succeeded), InProcess(succeeded)
    first = reconciler_for(store, clock, first_target, lease_seconds=30)
    second = Reconciler(store, clock=clock, owner="o2", config=ReconcileConfig(lease_seconds=30),
                        targets=Targets(memory={"t": second_target}))
    await hipq.create_queue(queue())  # created a moment ago
    for i in range(5):
        await enqueue(hipq, f"j{i}")
    assert (await tick(first)).ran_inline == 5
    assert (await tick(second)).launched == 0  # the queue is the first one's
    for i in range(5, 10):
        await enqueue(hipq, f"j{i}")
    clock.advance(31)  # the first daemon is gone: its lease runs out
    assert (await tick(second)).ran_inline == 5
    assert second.held == {"q"}
    launched = first_target.ids() + second_target.ids()
    assert sorted(launched) == sorted(f"j{i}" for i in range(10))
    for i in range(10):
        assert (await job(hipq, f"j{i}")).status is JobState.SUCCEEDED


async def test_a_backlog_runs_each_job_once_with_the_next_page_read_during_the_archive(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    """With more due than a page, each tick reads the next page while its archive is
    written (PostgreSQL): the jobs that tick ran are left out of it, a job
    enqueued meanwhile still runs, and each runs exactly once."""
    target = InProcess(succeeded)
    reconciler = reconciler_for(store, clock, target, fetch_limit=5)
    await hipq.create_queue(queue())
    for i in range(23):
        await enqueue(hipq, f"j{i:02d}")
    used: list[list[str]] = []  # the pages read ahead that a tick took
    take = reconciler.pages_ahead.take

    async def counted(queue: str, now: Any, *, widen: bool) -> list[Job] | None:
        page = await take(queue, now, widen=widen)
        if page is not None:
            used.append([j.id for j in page])
        return page

    reconciler.pages_ahead.take = counted  # type: ignore[method-assign]
    ticks = 0
    while len(target.ids()) < 24:
        result = await tick(reconciler)
        ticks += 1
        if ticks == 2:
            await enqueue(hipq, "late")
        assert ticks < 20, target.ids()
    assert (await tick(reconciler)).launched == 0
    assert sorted(target.ids()) == sorted([f"j{i:02d}" for i in range(23)] + ["late"])
    assert len(set(target.ids())) == 24  # none twice
    for i in range(23):
        assert (await job(hipq, f"j{i:02d}")).status is JobState.SUCCEEDED
    assert result is not None
    if store.dialect == "postgresql":  # pages read ahead were used, never a job run
        assert len(used) >= 3, used
    else:  # SQLite: every tick reads its own
        assert used == []


async def test_a_job_cancelled_after_the_page_was_read_stays_cancelled(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    """A job in a page read ahead and cancelled before the next tick: its try may
    run (as any in-tick try read before a cancel), but the job stays cancelled,
    with no second end."""
    target = InProcess(succeeded)
    reconciler = reconciler_for(store, clock, target, fetch_limit=3)
    await hipq.create_queue(queue())
    for i in range(9):
        await enqueue(hipq, f"j{i}")
    await tick(reconciler)  # j0-j2 run; j3-j5 read ahead
    await hipq.cancel("q", "j4")
    while (await tick(reconciler)).launched:
        pass
    assert (await job(hipq, "j4")).status is JobState.CANCELLED
    for i in (0, 1, 2, 3, 5, 6, 7, 8):
        assert (await job(hipq, f"j{i}")).status is JobState.SUCCEEDED
    assert target.ids().count("j4") <= 1


async def test_pages_read_ahead_start_after_the_last_job_that_ran(
        hipq: Hipq, store: Store, clock: FakeClock) -> None:
    """PostgreSQL reads the page after a page that ran from its last job on (the jobs
    that ran are not read again); a job enqueued ahead of the backlog meanwhile is
    seen (that page is read from the start) and runs within two ticks."""
    target = InProcess(succeeded)
    reconciler = reconciler_for(store, clock, target, fetch_limit=4)
    await hipq.create_queue(queue())
    for i in range(20):
        await enqueue(hipq, f"j{i:02d}")
    answers: list[bool] = []  # whether each read after a page gave that page
    read_after = store.job_fetch_due_after

    async def counted(**kwargs: Any) -> list[Job] | None:
        page = await read_after(**kwargs)
        answers.append(page is not None)
        return page

    store.job_fetch_due_after = counted  # type: ignore[method-assign]
    await tick(reconciler)
    await tick(reconciler)
    await enqueue(hipq, "urgent", priority=-1)
    ticks_until_urgent = 0
    while "urgent" not in target.ids():
        await tick(reconciler)
        ticks_until_urgent += 1
    while (await tick(reconciler)).launched:
        pass
    assert ticks_until_urgent <= 2
    assert sorted(target.ids()) == sorted([f"j{i:02d}" for i in range(20)] + ["urgent"])
    assert len(set(target.ids())) == 21  # none twice
    ran_order = [i for i in target.ids() if i != "urgent"]
    assert ran_order == sorted(ran_order)  # the backlog in its order
    if store.dialect == "postgresql":
        assert answers.count(True) >= 3, answers
        assert False in answers, answers  # the page the urgent job came ahead of
    else:
        assert answers == []

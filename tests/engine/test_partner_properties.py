"""Properties of the partner's word (docs/throttling.md), over drawn runs.

1. :class:`~hipq.engine.partner_word.PartnerWord` alone, over any sequence of throttled,
   succeeded and timed-out tries: the effective limit stays within
   ``[adaptive.min, concurrency]``; a throttled try's pause lasts at least
   ``backoff.initial_seconds`` and at most a day; the queue is paused right after.
2. The real reconciler on each database with a clock moved by hand, behind a
   partner that refuses (429, with or without a time) whenever it already holds
   ``C`` tries: never more running than the queue's concurrency, never a launch
   while the queue is paused, no attempt spent on a refusal, no job lost: every job
   ends ``succeeded`` at attempt 1.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from hipq.config import QueueConfig
from hipq.engine import Reconciler
from hipq.engine.partner_word import PartnerWord
from hipq.jobs import Job, JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Accepted, Completed, LaunchOutcome, Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, job, queue, respond, tick

RUN_SETTINGS = settings(max_examples=15, deadline=None, database=None,
                        phases=[Phase.explicit, Phase.generate],
                        suppress_health_check=[HealthCheck.function_scoped_fixture,
                                               HealthCheck.too_slow])
START = datetime(2026, 1, 5, 12, tzinfo=UTC)

events = st.lists(st.tuples(st.sampled_from(["throttled", "succeeded", "timeout"]),
                            st.floats(0, 5), st.one_of(st.none(), st.floats(0, 10**6)),
                            st.floats(0, 3)), max_size=60)


@given(concurrency=st.integers(1, 80), low=st.integers(1, 80),
       every=st.integers(1, 30), decrease=st.floats(0.05, 0.95),
       initial=st.floats(0.05, 10), learn=st.booleans(), run=events)
@settings(max_examples=200, deadline=None)
def test_the_partner_word_stays_in_bounds(concurrency: int, low: int, every: int,
                                          decrease: float, initial: float, learn: bool,
                                          run: list[tuple[str, float, Any, float]]) -> None:
    config = QueueConfig(id="q", concurrency=concurrency,
                         adaptive={"min": min(low, concurrency), "increase_every": every,
                                   "decrease": decrease},
                         backoff={"initial_seconds": initial,
                                  "max_seconds": max(initial, 60), "learn": learn})
    spec = config.to_spec()
    word = PartnerWord()  # its store work is plans: none runs here
    now = START
    for kind, advance, partner_time, launched_ago in run:
        now += timedelta(seconds=advance)
        launched = now - timedelta(seconds=launched_ago)
        if kind == "throttled":
            until = word.throttled(spec, None, launched, partner_time, "HTTP 429", now)
            if learn and partner_time is None:  # no time given: the rate is learned
                assert until == now
                rate = word.learned_rate("q", now)
                assert rate is not None
                assert rate > 0
                continue
            assert until >= now + timedelta(seconds=initial) - timedelta(microseconds=1)
            assert until <= now + timedelta(days=1, seconds=initial)
            assert word.queue_pause("q", now) is not None
        elif kind == "succeeded":
            word.succeeded(spec, None, now)
        else:
            word.slow_down(spec, launched, now)
        effective = word.effective(spec)
        assert effective is not None
        assert min(low, concurrency) <= effective <= concurrency


class Partner:
    """A memory target that refuses (429) while it holds ``capacity`` tries."""

    def __init__(self, capacity: int, after: float | None) -> None:
        self.capacity = capacity
        self.after = after
        self.holding: set[str] = set()
        self.refused = 0

    def answer(self, j: Job) -> LaunchOutcome:
        if len(self.holding) >= self.capacity:
            self.refused += 1
            error: dict[str, Any] = {"detail": "HTTP 429 from http://partner", "status": 429}
            if self.after is not None:
                error["retry_after"] = self.after
            return Completed(status="throttled", kind="throttled", error=error)
        self.holding.add(j.id)
        return Accepted()


@given(capacity=st.integers(1, 4), concurrency=st.integers(1, 12),
       adaptive=st.booleans(), after=st.sampled_from([None, 1.0, 3.0]),
       jobs=st.integers(1, 15), finishes=st.lists(st.integers(0, 3), min_size=40,
                                                    max_size=40))
@RUN_SETTINGS
async def test_behind_a_refusing_partner_no_job_is_lost_nor_any_attempt_spent(
        store: Store, capacity: int, concurrency: int, adaptive: bool,
        after: float | None, jobs: int, finishes: list[int]) -> None:
    clock = FakeClock(START)
    hipq = Hipq(store, clock=clock)
    target = MemoryTarget()
    partner = Partner(capacity, after)
    target.behaviour = partner.answer
    reconciler = Reconciler(store, clock=clock, owner="o1",
                            targets=Targets(memory={"t": target}))
    queue_id = f"p{abs(hash((capacity, concurrency, adaptive, after, jobs))) % 10**9}"
    settings_: dict[str, Any] = {"concurrency": concurrency, "attempts": 1,
                                 "backoff": {"initial_seconds": 0.5, "max_seconds": 4,
                                             "max_throttled": 1000}}
    if adaptive:
        settings_["adaptive"] = {"min": 1, "increase_every": 2, "decrease": 0.5}
    await hipq.create_queue(queue(queue_id, **settings_))
    ids = [f"j{i}" for i in range(jobs)]
    for job_id in ids:
        await enqueue(hipq, job_id, queue_id)
    for step in range(400):
        paused = reconciler.partner.queue_pause(queue_id, clock.now()) is not None
        before = len(target.launched)
        await tick(reconciler)
        if paused:
            assert len(target.launched) == before, "a launch while the queue was paused"
        running = [h for h in reconciler.batch.values() if h.outcome is None]
        assert sum(h.weight for h in running) <= concurrency
        # the partner finishes some of what it holds (all of it now and then)
        n = len(partner.holding) if step % 7 == 6 else finishes[step % len(finishes)]
        for job_id in sorted(partner.holding)[:n]:
            partner.holding.discard(job_id)
            await respond(hipq, job_id, queue_id, status="succeeded")
        clock.advance(0.5)
        states = [(await job(hipq, i, queue_id)).status for i in ids]
        if all(s is JobState.SUCCEEDED for s in states):
            break
        if step % 7 == 6:
            clock.advance(5)  # let every pause pass
    for job_id in ids:
        done = await job(hipq, job_id, queue_id)
        assert done.status is JobState.SUCCEEDED, (job_id, done)
        assert done.attempt == 1  # the refusals spent nothing
    await reconciler.drain()

"""A waiting try costs a few hundred bytes (issue: 100,000 running jobs in a daemon
under 150 MB): once it has waited through a tick, the batch keeps the fields a tick
reads and lets the job (its data, its stamps) go. Not a timing test: tracemalloc
counts what stays allocated (``bench/batch_memory.py`` prints the same figure)."""

from __future__ import annotations

import gc
import tracemalloc
from datetime import UTC, datetime, timedelta

from hipq.engine.batch import Batch
from hipq.engine.held import HeldTry, Outcome
from hipq.jobs import JobState
from hipq.testing import claimed_jobs

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
TRIES = 10_000
MAX_BYTES_PER_WAITING_TRY = 420  # 324 measured (416 with 19 slots and string tokens); the jobs
# as read take about 1,450


def test_a_waiting_try_lets_its_job_go_and_stays_small() -> None:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        batch = Batch()
        jobs = claimed_jobs(TRIES, at=NOW)
        for job in jobs:
            batch.add(HeldTry(job=job, deadline=job.deadline))
        del jobs, job
        assert batch.overdue(NOW) == []
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held / TRIES < MAX_BYTES_PER_WAITING_TRY
    assert all(batch[key].job is None for key in batch)


def test_a_try_that_ends_within_its_first_tick_keeps_its_job() -> None:
    """The usual fast try (a python target, a quick callback) never pays for a read
    back: it ended before the tick that would let its job go."""
    batch = Batch()
    quick, slow = (HeldTry(job=j, deadline=j.deadline) for j in claimed_jobs(2, at=NOW))
    batch.add(quick)
    batch.add(slow)
    batch.end(quick, Outcome(status=JobState.FAILED))
    batch.overdue(NOW)
    assert quick.job is not None
    assert slow.job is None


def test_deadlines_are_found_after_the_jobs_are_let_go() -> None:
    batch = Batch()
    jobs = claimed_jobs(3, at=NOW)
    entries = [HeldTry(job=j, deadline=j.deadline) for j in jobs]
    for entry in entries:
        batch.add(entry)
    batch.overdue(NOW)
    batch.extend(entries[1], NOW + timedelta(days=2), inbox_id=7)
    batch.end(entries[2], Outcome(status=JobState.SUCCEEDED))
    later = NOW + timedelta(days=1, seconds=1)
    assert batch.overdue(later) == [entries[0]]
    assert batch.overdue(NOW + timedelta(days=3)) == [entries[1]]
    assert batch.overdue(NOW + timedelta(days=9)) == []

"""Bytes the current batch holds per waiting try (``tracemalloc``, in one process).

N running jobs are built as a claim or an adoption returns them (every string and
timestamp its own object, as a database driver decodes them:
:func:`hipq.testing.claimed_jobs`), added to a :class:`hipq.engine.batch.Batch`,
and a tick's deadline check runs (where a try that still waits lets its job go).
What stays allocated once the jobs as read are gone, divided by N, is the figure;
the daemon's RSS with 100,000 running jobs is its baseline plus about N times this
(``bench/run --only idle``). The tokens are 32 hex digits, as hipq makes them: a batch
of :data:`~hipq.engine.batch.COMPACT_TOKENS_FROM` tries or more keeps a waiting try's
token as a number (``--jobs 9000`` shows a batch below that).

    python bench/batch_memory.py [--jobs 100000]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import tracemalloc
from datetime import UTC, datetime

from hipq.engine.batch import Batch
from hipq.engine.held import HeldTry
from hipq.testing import claimed_jobs

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def measure(n: int) -> dict[str, float]:
    """Bytes per try as read (the jobs and the entries) and once the tries wait."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    batch = Batch()
    jobs = claimed_jobs(n, at=NOW)
    for job in jobs:
        batch.add(HeldTry(job=job, deadline=job.deadline))
    read = tracemalloc.get_traced_memory()[0] - before
    del jobs, job
    batch.overdue(NOW)  # a tick: the tries that still wait let their jobs go
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(batch) == n
    return {"jobs": n, "bytes_per_try_as_read": round(read / n),
            "bytes_per_waiting_try": round(held / n), "held_mb": round(held / 2**20, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=100_000)
    print(json.dumps(measure(p.parse_args().jobs)))


if __name__ == "__main__":
    main()

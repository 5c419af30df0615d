"""The partner's word's proof (docs/throttling.md), small (``bench/partner_proof.py``): a fake
partner of 10 concurrent requests answered in 0.1 s (100/s), refusing beyond with a bare 429, behind
a queue configured far above it (``concurrency: 60``, no rate limit) with the settings the
proof chose (``adaptive: {decrease: 0.75}``, ``backoff: {initial_seconds: 0.1}``),
through real ``hipq run`` processes: on SQLite, on PostgreSQL, and on PostgreSQL with
three daemons, the queue's owner killed with SIGKILL a third of the way.

The full proof is a benchmark: ``bench/run --only partner`` (3,000 jobs a set-up, on a
PostgreSQL with stock durability) or ``python -m bench.partner_proof`` (one set-up,
``--jobs``), where after the first 10 s throttled tries stay under 10% of the
launches and the partner accepts at least 70% of its capacity. That second figure is
a speed, measured on a machine doing nothing else; in the suite, beside other tests
on a few workers, it is not (it came out at 50-65% there).

Here each set-up runs a few hundred jobs, about ten seconds. What it asserts holds
whatever the machine's load: every job ends, none failed, no attempt was spent on a
429 (a throttled try counted as a failed one, or a job's attempt out of step with
its tries), and once the limit has come down (within the first second of the
partner's first request, in every run seen: :data:`LEARNING_SECONDS` is twice that)
throttled tries stay under 10% of the launches. The accepted share has a generous
bound only (:data:`MIN_ACCEPTED_SHARE`, a timing bound): it catches a queue that
stalls or pauses far longer than the partner asks, not a slow machine.

``HIPQ_PROOF_EVENT_LOOP`` sets the daemons' ``event_loop`` (default ``auto``, hipq's
own default: uvloop where installed)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bench.partner_proof import CHOSEN_SETTINGS, MAX_THROTTLED_SHARE, PARTNER_CONCURRENCY, run_proof

pytestmark = pytest.mark.slow

JOBS = 500  # about 5 s at the partner's 100/s
# The takeover after the kill leaves the partner idle for about 2.5 s (the 3 s lease,
# less the time since the dead owner's last heartbeat); the daemons left take the
# remaining two thirds.
KILL_JOBS = 600
# SQLite's tick is slower than PostgreSQL's (one writer, each transaction through
# aiosqlite's thread): against a partner answering in 0.1 s the accepted share
# measures the tick more than the partner's word (docs/throttling.md). Here the
# partner answers in 0.2 s (capacity 50/s), as in the full proof's SQLite runs.
SQLITE_PARTNER_LATENCY = 0.2
SQLITE_JOBS = 350  # about 7 s at 50/s
LEARNING_SECONDS = 2
MIN_ACCEPTED_SHARE = 0.3
EVENT_LOOP = os.environ.get("HIPQ_PROOF_EVENT_LOOP", "auto")


def after_learning(report: dict[str, Any]) -> dict[str, Any]:
    """Launches, refusals and the accepted share of capacity from
    :data:`LEARNING_SECONDS` after the partner's first request to the last whole
    second (the report's per-second timeline)."""
    whole = report["timeline"][LEARNING_SECONDS:-1]
    accepted = sum(second["accepted"] for second in whole)
    refused = sum(second["refused"] for second in whole)
    capacity = PARTNER_CONCURRENCY / report["partner"]["latency_s"] * len(whole)
    return {"seconds": len(whole), "launches": accepted + refused, "refused": refused,
            "throttled_share": refused / max(accepted + refused, 1),
            "accepted_share_of_capacity": accepted / capacity if capacity else None}


def assert_proof(report: dict[str, Any], jobs: int) -> None:
    later = after_learning(report)
    context = {"after_learning": later,
               **{k: report[k] for k in ("after_warmup", "launches", "throttled", "statuses",
                                         "tries_by_outcome", "wall_s", "killed",
                                         "final_effective_concurrency", "stalled_after_s",
                                         "loadavg_after", "timeline")}}
    assert report["terminal"] == jobs, context
    assert report["failed_jobs"] == 0, context
    assert report["attempts_spent_on_429s"] == 0, context
    assert later["seconds"] >= 3, context  # the run measured well past the learning
    assert later["throttled_share"] < MAX_THROTTLED_SHARE, context
    assert later["accepted_share_of_capacity"] >= MIN_ACCEPTED_SHARE, context


async def proof(tmp_path: Path, database: str, jobs: int, **options: Any) -> dict[str, Any]:
    return await run_proof(database=database, jobs=jobs, workdir=tmp_path,
                           settings=CHOSEN_SETTINGS, event_loop=EVENT_LOOP, within=120,
                           **options)


async def test_the_partner_proof_on_sqlite(tmp_path: Path) -> None:
    report = await proof(tmp_path, "sqlite", SQLITE_JOBS, latency=SQLITE_PARTNER_LATENCY)
    assert_proof(report, SQLITE_JOBS)


async def test_the_partner_proof_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    assert_proof(await proof(tmp_path, pg_url, JOBS), JOBS)


async def test_the_partner_proof_with_three_daemons_and_the_owner_killed(
        tmp_path: Path, pg_url: str) -> None:
    report = await proof(tmp_path, pg_url, KILL_JOBS, daemons=3, kill_one=True)
    assert report["killed"] is not None, "the owner of the queue was not killed"
    assert_proof(report, KILL_JOBS)

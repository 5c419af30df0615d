"""Crash tests of the intake (docs/from-your-database.md) against real ``hipq run``
processes.

PostgreSQL: two daemons share one database and one queue whose Python target
(``tests.e2e.crash_target:work``) succeeds at once. One transaction commits 50,000
intake rows with ``hipq.sql.enqueue_many``, about 1% of which must be rejected (the
id ``..``, and repeats of an id with another body), plus a few repeats of an id
with the same body (idempotent: no second job); some repeats are of a row of the
previous ingest batch. The daemon that owns the queue is
SIGKILLed mid-ingest, once 20% (and before 80%) of the rows are done, inside the
crash window of hipq/intake.py: after it inserted a batch's jobs and before it
deleted their rows. To land there, the test watches the head of the pending rows;
when a job of one of them shows, it stops the owner (SIGSTOP), lets the statements
it had sent finish, and looks again: rows whose jobs exist are the window (SIGKILL);
otherwise the owner goes on (SIGCONT). The test fails if the window was never
caught. The survivor takes the queue over once the lease (3 s) expires and ingests
the rest, the window's rows again (their jobs exist: idempotent repeats). Checked
once no row is pending, in one snapshot of ``jobs`` and ``archived_jobs``:

* every row that was the first of its id is exactly one job (live or archived) with
  the data that row asked for; no job is there twice, none is there for another id;
* every row expected to be rejected is a rejected row with its error (``invalid id``,
  ``conflict``), and no other row is; same-body repeats are gone (ingested);
* the jobs then all succeed (nothing acknowledged is lost); rows repeating archived
  jobs are then nothing new (same body) or conflicts (another body).

SQLite: a producer in another process (``python -c`` with a sync SQLAlchemy engine on
the daemon's database file) commits a row with ``hipq.sql.enqueue`` while ``hipq
run`` ticks every 5 s; the SQLite watcher wakes the tick and the job launches
within 1 s of the commit.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest

import hipq.sql
from tests.api.subprocess_daemon import hipq_run_process
from tests.scale.cluster import Cluster, Daemon, empty_database, wait_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
QUEUE = "intake-crash"
ROWS = 50_000
LEASE_SECONDS = 3.0
INVALID_EVERY = 200  # n % 200 == 0: the id ".." (250 rows)
CONFLICT_EVERY = 200  # n % 200 == 100: the id of row n - 50 with another body (250 rows)
SAME_EVERY = 1000  # n % 1000 == 750: the id of row n - 1 with the same body (idempotent)
# repeats of a row of the previous ingest batch (5,000 rows), whose job may be archived
# by then: n % 5000 == 1321 with another body (row n - 4000), == 1530 with the same
# body (row n - 3000)
FAR_EVERY, FAR_CONFLICT, FAR_SAME = 5000, (1321, 4000), (1530, 3000)
KILL_FROM, KILL_UNTIL, KILL_ANYWAY = 0.2, 0.8, 0.7  # shares of the rows done
FREEZE_SECONDS = 0.03
INGEST_DEADLINE = 60.0
FINISH_DEADLINE = 60.0


# -- the rows and what each must become -----------------------------------------------


@dataclass
class Plan:
    """The rows in intake order, and what each is expected to become."""

    jobs: list[dict[str, Any]] = field(default_factory=list)  # hipq.sql.enqueue_many's
    kinds: list[str] = field(default_factory=list)  # job | same | invalid | conflict

    @property
    def job_data(self) -> dict[str, dict[str, Any]]:
        """Each job id and the data of the row that makes it (its first row)."""
        return {j["id"]: j["data"] for j, kind in zip(self.jobs, self.kinds, strict=True)
                if kind == "job"}


def plan_rows(count: int) -> Plan:
    """Row n is job ``j<n>``, except for the invalid ids and the repeats; what each
    row must become follows from the rows before it (the first body of an id wins)."""
    plan = Plan()
    first: dict[str, dict[str, Any]] = {}
    for n in range(count):
        if n % INVALID_EVERY == 0:
            job: dict[str, Any] = {"id": "..", "data": {"n": n}}
        elif n % CONFLICT_EVERY == 100:
            job = {"id": f"j{n - 50}", "data": {"n": n - 50, "other": n}}
        elif n % FAR_EVERY == FAR_CONFLICT[0] and n >= FAR_CONFLICT[1]:
            job = {"id": f"j{n - FAR_CONFLICT[1]}", "data": {"n": n - FAR_CONFLICT[1],
                                                              "other": n}}
        elif n % FAR_EVERY == FAR_SAME[0] and n >= FAR_SAME[1]:
            job = {"id": f"j{n - FAR_SAME[1]}", "data": {"n": n - FAR_SAME[1]}}
        elif n % SAME_EVERY == 750:
            job = {"id": f"j{n - 1}", "data": {"n": n - 1}}
        else:
            job = {"id": f"j{n}", "data": {"n": n}}
        plan.jobs.append(job)
        if job["id"] == "..":
            plan.kinds.append("invalid")
        elif job["id"] not in first:
            first[job["id"]] = job["data"]
            plan.kinds.append("job")
        else:
            plan.kinds.append("same" if first[job["id"]] == job["data"] else "conflict")
    return plan


# -- the PostgreSQL crash test --------------------------------------------------------


@pytest.fixture
async def database(pg_url: str) -> AsyncIterator[tuple[str, str]]:
    async with empty_database(pg_url, prefix="hipq_intake_crash") as urls:
        yield urls


@pytest.fixture
def cluster(database: tuple[str, str], tmp_path: Path) -> Any:
    pg, url = database
    queue = {
        "id": QUEUE, "attempts": 20, "concurrency": 200,
        "target": {"kind": "python", "function": "tests.e2e.crash_target:work",
                   "options": {"log_path": str(tmp_path / "launches.log"), "max_sleep": 0}},
        "retry": {"strategy": "fixed", "delay_seconds": 0.2},
    }
    made = Cluster(url=url, pg=pg, workdir=tmp_path, queues=[queue],
                   reconcile={"interval_seconds": 0.5, "lease_seconds": LEASE_SECONDS})
    yield made
    made.cleanup()


async def _owner(cluster: Cluster, conn: asyncpg.Connection) -> Daemon | None:
    owner = await conn.fetchval(
        "SELECT owner FROM leases WHERE queue = $1 AND expires_at > now()", QUEUE)
    return None if owner is None else cluster.by_pid(owner)


async def _commit_rows(conn: asyncpg.Connection, plan: Plan) -> list[int]:
    """One transaction: the rows, and their intake ids read back before the commit."""
    async with conn.transaction():
        written = await hipq.sql.enqueue_many(conn, QUEUE, plan.jobs)
        ids = [r["id"] for r in await conn.fetch(
            "SELECT id FROM job_intake WHERE queue = $1 ORDER BY id", QUEUE)]
    assert written == len(ids) == len(plan.jobs)
    return ids


@dataclass
class Kill:
    done_share: float  # of the rows, when the owner was killed
    window_rows: int  # pending rows whose job the owner had inserted already
    freezes: int  # times the owner was stopped and looked at


async def _kill_mid_ingest(cluster: Cluster, conn: asyncpg.Connection, ids: list[int]) -> Kill:
    """Once 20% of the rows are done, watch the head of the pending rows: when a job
    of one of them shows, stop the owner (SIGSTOP) and look again; caught between
    inserting a batch's jobs and deleting its rows, it is SIGKILLed there, else it
    goes on (SIGCONT). At 70% done it is killed wherever it is."""
    owner = await _owner(cluster, conn)
    assert owner is not None
    assert owner.alive
    position = {row_id: i for i, row_id in enumerate(ids)}
    deadline = time.monotonic() + INGEST_DEADLINE
    freezes = 0
    while True:
        head = await conn.fetchrow(HEAD, QUEUE)
        done = 1.0 if head["first"] is None else position[head["first"]] / len(ids)
        assert done < KILL_UNTIL, f"ingested {done:.0%} before the test could kill"
        assert time.monotonic() < deadline, f"only {done:.0%} ingested"
        if done < KILL_FROM or not (head["seen"] or done >= KILL_ANYWAY):
            await asyncio.sleep(0.001)
            continue
        os.kill(owner.pid, signal.SIGSTOP)
        freezes += 1
        await asyncio.sleep(FREEZE_SECONDS)  # statements it had sent finish meanwhile
        window = await _window_rows(conn)
        if window or done >= KILL_ANYWAY:
            cluster.kill(owner)  # SIGKILL ends a stopped process too
            first = (await conn.fetchrow(HEAD, QUEUE))["first"]
            return Kill(done_share=round(position[first] / len(ids), 3), window_rows=window,
                        freezes=freezes)
        os.kill(owner.pid, signal.SIGCONT)


# the first pending row, and whether one of the next 50 has its job already (cheap)
HEAD = """
WITH head AS (SELECT id, job_id, data FROM job_intake WHERE queue = $1 AND error IS NULL
              ORDER BY id LIMIT 50)
SELECT min(h.id) AS first, coalesce(bool_or(
    EXISTS (SELECT 1 FROM jobs j WHERE j.queue = $1 AND j.id = h.job_id AND j.data = h.data)
    OR EXISTS (SELECT 1 FROM archived_jobs a WHERE a.queue = $1 AND a.id = h.job_id
               AND a.data = h.data)), false) AS seen
FROM head h
"""


async def _window_rows(conn: asyncpg.Connection) -> int:
    """Pending rows whose job (same id, same data) exists: what the dead owner inserted
    and did not delete."""
    return int(await conn.fetchval(
        "SELECT count(*) FROM job_intake i WHERE i.queue = $1 AND i.error IS NULL AND"
        " (EXISTS (SELECT 1 FROM jobs j WHERE j.queue = i.queue AND j.id = i.job_id"
        "          AND j.data = i.data)"
        "  OR EXISTS (SELECT 1 FROM archived_jobs a WHERE a.queue = i.queue"
        "             AND a.id = i.job_id AND a.data = i.data))", QUEUE))


async def _pending(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval(
        "SELECT count(*) FROM job_intake WHERE queue = $1 AND error IS NULL", QUEUE))


def _check_outcome(plan: Plan, ids: list[int], jobs: list[asyncpg.Record],
                   rejected: dict[int, str]) -> None:
    counts = collections.Counter(r["id"] for r in jobs)
    twice = {job_id: n for job_id, n in counts.items() if n > 1}
    assert not twice, f"jobs stored twice (live and archived): {sorted(twice)[:20]}"
    expected = plan.job_data
    stored = {r["id"]: json.loads(r["data"]) for r in jobs}
    assert set(stored) == set(expected), (
        f"missing {sorted(set(expected) - set(stored))[:20]}, "
        f"unexpected {sorted(set(stored) - set(expected))[:20]}")
    wrong = [job_id for job_id, data in expected.items() if stored[job_id] != data]
    assert not wrong, f"jobs with other data than their first row: {wrong[:20]}"
    kinds = dict(zip(ids, plan.kinds, strict=True))
    wanted = {row_id for row_id, kind in kinds.items() if kind in ("invalid", "conflict")}
    assert set(rejected) == wanted, (
        f"rejected but should not be: {sorted(set(rejected) - wanted)[:20]}; "
        f"not rejected: {sorted(wanted - set(rejected))[:20]}")
    for row_id, error in rejected.items():
        prefix = "invalid id" if kinds[row_id] == "invalid" else "conflict"
        assert error.startswith(prefix), (row_id, kinds[row_id], error)


async def test_every_row_is_one_job_or_one_rejected_row_when_the_owner_dies_mid_ingest(
        cluster: Cluster) -> None:
    started = time.monotonic()
    plan = plan_rows(ROWS)
    rejected_share = (plan.kinds.count("invalid") + plan.kinds.count("conflict")) / ROWS
    assert 0.009 < rejected_share < 0.011
    daemons = [cluster.start(), cluster.start()]
    for daemon in daemons:
        await cluster.wait_serving(daemon)
    conn = await asyncpg.connect(cluster.pg)
    try:
        await wait_until(lambda: _owner_known(cluster, conn), 15, "a daemon owns the queue")
        ids = await _commit_rows(conn, plan)
        kill = await _kill_mid_ingest(cluster, conn, ids)
        assert kill.window_rows > 0, f"the owner was never caught in its crash window: {kill}"
        survivor = next(d for d in daemons if d.alive)
        await wait_until(lambda: _none_pending(conn), INGEST_DEADLINE,
                         f"the survivor ingested the rest:\n{survivor.tail()}")
        jobs = await conn.fetch(  # one statement: one snapshot while jobs are archived
            "SELECT id, data::text AS data FROM jobs WHERE queue = $1"
            " UNION ALL SELECT id, data::text FROM archived_jobs WHERE queue = $1", QUEUE)
        rejected = {r["id"]: r["error"] for r in await conn.fetch(
            "SELECT id, error FROM job_intake WHERE queue = $1", QUEUE)}
        assert all(error is not None for error in rejected.values())
        _check_outcome(plan, ids, jobs, rejected)
        await wait_until(lambda: _all_succeeded(conn, len(plan.job_data)), FINISH_DEADLINE,
                         f"every job succeeded:\n{survivor.tail()}")
        await _repeats_of_archived_jobs(conn, rejected=len(rejected))
        assert survivor.alive, survivor.tail()
    finally:
        await conn.close()
    sys.stderr.write(f"intake crash: killed at {kill}; {time.monotonic() - started:.1f} s\n")


async def _repeats_of_archived_jobs(conn: asyncpg.Connection, *, rejected: int) -> None:
    """Every job archived: rows repeating some of them with the same body are
    ingested as nothing new, with another body rejected as conflicts."""
    same = [{"id": f"j{n}", "data": {"n": n}} for n in range(1, 20)]
    other = [{"id": f"j{n}", "data": {"n": n, "other": -1}} for n in range(21, 40)]
    async with conn.transaction():
        await hipq.sql.enqueue_many(conn, QUEUE, same + other)
    await wait_until(lambda: _none_pending(conn), 10, "the repeats ingested")
    assert await conn.fetchval("SELECT count(*) FROM jobs WHERE queue = $1", QUEUE) == 0
    errors = [r["error"] for r in await conn.fetch(
        "SELECT error FROM job_intake WHERE queue = $1 ORDER BY id OFFSET $2", QUEUE, rejected)]
    assert len(errors) == len(other), errors
    assert all(error.startswith("conflict") for error in errors), errors


async def _owner_known(cluster: Cluster, conn: asyncpg.Connection) -> bool:
    return await _owner(cluster, conn) is not None


async def _none_pending(conn: asyncpg.Connection) -> bool:
    return await _pending(conn) == 0


async def _all_succeeded(conn: asyncpg.Connection, jobs: int) -> bool:
    row = await conn.fetchrow(
        "SELECT count(*) FILTER (WHERE status = 'succeeded') AS ok, count(*) AS all"
        " FROM archived_jobs WHERE queue = $1", QUEUE)
    assert row["ok"] == row["all"], "a job ended other than succeeded"
    return int(row["ok"]) == jobs


# -- SQLite: a producer in another process ----------------------------------------------

PRODUCER = """
import sys, time
from sqlalchemy import create_engine
import hipq.sql
engine = create_engine(sys.argv[1])
with engine.connect() as conn:  # connected and warm before the timed commit
    with conn.begin():
        hipq.sql.enqueue(conn, "orders", "sql-1", {"n": 1})
    print(time.time(), flush=True)
"""


async def test_a_row_committed_by_another_process_launches_within_a_second_on_sqlite(
        tmp_path: Path) -> None:
    path = tmp_path / "hipq.db"
    launches = tmp_path / "launches.log"
    config = {
        "database": {"url": f"sqlite+aiosqlite:///{path}"},
        "api": {"port": 0},
        "reconcile": {"interval_seconds": 5},
        "queues": [{"id": "orders", "target": {
            "kind": "python", "function": "tests.e2e.crash_target:work",
            "options": {"log_path": str(launches), "max_sleep": 0}}}],
    }
    async with hipq_run_process(tmp_path, config):
        await wait_until(lambda: _sqlite_owned(path), 10, "the daemon owns the queue")
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", PRODUCER, f"sqlite:///{path}"],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        committed = float(done.stdout.split()[-1])
        await wait_until(lambda: _launched(launches), 5, "the job launched")
        launched = launches.stat().st_mtime
    assert launches.read_text().split() == ["orders", "sql-1", "1"]
    assert launched - committed < 1.0, launched - committed
    sys.stderr.write(f"sqlite intake: commit -> launch {launched - committed:.3f} s\n")


async def _sqlite_owned(path: Path) -> bool:
    import sqlite3

    def read() -> bool:
        conn = sqlite3.connect(str(path), timeout=10)
        try:
            return conn.execute("SELECT count(*) FROM leases WHERE queue = 'orders'"
                                ).fetchone()[0] == 1
        except sqlite3.OperationalError:  # not migrated yet
            return False
        finally:
            conn.close()

    return await asyncio.to_thread(read)


async def _launched(path: Path) -> bool:
    return await asyncio.to_thread(lambda: path.exists() and path.stat().st_size > 0)

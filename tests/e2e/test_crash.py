"""Crash test: a real ``hipq run`` on PostgreSQL is SIGKILLed mid-work again and again.

2,000 jobs flow through a Python target (``tests.e2e.crash_target:work``) on two
queues, one ``at_least_once`` and one ``at_most_once``. Part of the jobs is
enqueued before the first daemon starts, the rest while daemons run (and get
killed). ``python -m hipq -c crash.yaml run`` is killed with SIGKILL mid-work
``KILLS`` times and restarted each time (the new process has a new owner id, so it
takes the queues over once the dead owner's lease expires). The kills land while
jobs are marked running but not confirmed, right after the target was called for
such a job (of either queue), or at a random moment. One more daemon is stopped
with SIGTERM mid-work (launches in flight): it must exit 0 having recorded every
launch (no unconfirmed running job) and released its leases. The last daemon runs
until every job is terminal and is then stopped with SIGTERM, which must exit 0.

The target appends ``"queue id attempt"`` to a launch log before it does any work,
so the log is a lower bound of what reached the "downstream". Checked afterwards:

* every acknowledged enqueue reached a terminal state in ``archived_jobs`` and
  nothing is left in ``jobs``; the leases were released by the graceful stop;
* ``at_least_once``: every job succeeded with the result of its last attempt;
  its history holds each attempt 1..N exactly once, the earlier ones ``lost``;
  the last attempt is in the launch log; no (job, attempt) was launched twice;
* ``at_most_once``: no job appears in the launch log more than once, every job
  was marked running exactly once (attempt 1, one history row); a job that
  succeeded was launched; one never launched is a ``lost`` failure;
* every launch in the log belongs to a job that was enqueued.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import yaml

from hipq.bodies import EnqueueRequest
from hipq.config import load_config
from hipq.service import Hipq
from hipq.store import InsertStatus, Store, open_store

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
ALO = "crash-alo"  # at_least_once
AMO = "crash-amo"  # at_most_once
JOBS_PER_QUEUE = 1000
EARLY = 400  # per queue, enqueued before the first daemon starts
LATE_CHUNKS = 3  # the rest, in this many chunks, while the first daemons run
REFUSE_EVERY = 10  # at_most_once jobs with n % 10 == 0 fail on purpose (not retryable)
KILLS = 6
TERMS = 1  # graceful stops mid-work, besides the kills
CONCURRENCY = 50
LEASE_SECONDS = 2.0
START_DEADLINE = 30.0  # a started daemon must make progress within this
FINISH_DEADLINE = 120.0  # the last daemon must finish everything within this
STOP_DEADLINE = 10.0  # SIGTERM -> exit


def _with_database(server_url: str, database: str) -> tuple[str, str]:
    """(asyncpg URL, SQLAlchemy URL) of ``database`` on the server of ``server_url``."""
    base = server_url.rsplit("/", 1)[0]
    scheme, rest = base.split("://", 1)
    scheme = "postgresql" if scheme.startswith("postgres") else scheme
    return f"{scheme}://{rest}/{database}", f"{scheme}+asyncpg://{rest}/{database}"


@pytest.fixture
async def crash_db(pg_url: str) -> AsyncIterator[tuple[str, str]]:
    name = f"hipq_crash_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    try:
        yield _with_database(pg_url, name)
    finally:
        admin = await asyncpg.connect(pg_url)
        try:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await admin.close()


def _write_config(tmp_path: Path, url: str, launch_log: Path) -> Path:
    def queue(queue_id: str, strategy: str, **options: Any) -> dict[str, Any]:
        return {
            "id": queue_id,
            "delivery_strategy": strategy,
            "attempts": 20,
            "concurrency": CONCURRENCY,
            "target": {"kind": "python", "function": "tests.e2e.crash_target:work",
                       "options": {"log_path": str(launch_log), "max_sleep": 0.05, **options}},
            "retry": {"strategy": "fixed", "delay_seconds": 0.2},
        }

    config = {
        "database": {"url": url, "pool_size": 5},
        "api": {"enabled": False},
        "reconcile": {"interval_seconds": 0.2, "lease_seconds": LEASE_SECONDS},
        "logging": {"level": "INFO"},
        "queues": [queue(ALO, "at_least_once"),
                   queue(AMO, "at_most_once", refuse_every=REFUSE_EVERY)],
    }
    path = tmp_path / "crash.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


@dataclass
class Progress:
    archived: int
    queued: int
    running: int

    @property
    def live(self) -> int:
        return self.queued + self.running


@dataclass
class Run:
    """The daemons started by the test, one at a time."""

    config: Path
    log: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    started: int = 0
    kills: list[Progress] = field(default_factory=list)
    terms: int = 0

    def start(self) -> None:
        assert self.proc is None
        self.started += 1
        with self.log.open("ab") as out:
            out.write(f"\n===== daemon #{self.started} =====\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hipq", "-c", str(self.config), "run"],
                cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def check_alive(self) -> None:
        assert self.proc is not None
        code = self.proc.poll()
        assert code is None, (f"daemon #{self.started} exited with {code} on its own:\n"
                              f"{self.tail()}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=10) == -signal.SIGKILL
        self.proc = None

    async def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(self.proc.wait, STOP_DEADLINE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"daemon did not stop within {STOP_DEADLINE}s of SIGTERM:\n"
                        f"{self.tail()}")
        self.proc = None
        return code

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None

    def tail(self, lines: int = 60) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])


async def _progress(conn: asyncpg.Connection) -> Progress:
    archived = await conn.fetchval("SELECT count(*) FROM archived_jobs")
    counts = dict(await conn.fetch("SELECT status, count(*) FROM jobs GROUP BY status"))
    return Progress(archived=archived, queued=counts.get("queued", 0),
                    running=counts.get("running", 0))


async def _enqueue(hipq: Hipq, queue: str, numbers: range) -> None:
    items = [(f"{queue}-{n}", EnqueueRequest(data={"n": n})) for n in numbers]
    outcomes = await hipq.enqueue_many(queue, items)
    assert [o.status for o in outcomes] == [InsertStatus.CREATED] * len(items)


async def _wait_progress(run: Run, conn: asyncpg.Connection, since: int, needed: int) -> Progress:
    """Poll until ``needed`` more jobs are archived than ``since`` (bounded)."""
    deadline = time.monotonic() + START_DEADLINE
    while True:
        run.check_alive()
        progress = await _progress(conn)
        if progress.archived - since >= needed or progress.live == 0:
            return progress
        assert time.monotonic() < deadline, (
            f"daemon #{run.started} made no progress in {START_DEADLINE}s "
            f"({progress}):\n{run.tail()}")
        await asyncio.sleep(0.01)


async def _unconfirmed(conn: asyncpg.Connection) -> int:
    """Running jobs whose launch is not confirmed yet: launches in flight."""
    return int(await conn.fetchval(
        "SELECT count(*) FROM jobs WHERE status = 'running' AND NOT launch_confirmed"))


async def _wait_in_flight(run: Run, conn: asyncpg.Connection) -> None:
    """Poll until some launches are in flight (bounded)."""
    deadline = time.monotonic() + START_DEADLINE
    while await _unconfirmed(conn) == 0:
        run.check_alive()
        assert time.monotonic() < deadline, (
            f"no launch in flight within {START_DEADLINE}s:\n{run.tail()}")
        await asyncio.sleep(0.005)


def _read_from(path: Path, offset: int) -> bytes:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read()


async def _wait_launching(run: Run, conn: asyncpg.Connection, launch_log: Path,
                          queue: str) -> None:
    """Poll until the target has just been called for a job of ``queue`` whose launch
    is not confirmed yet (it is in its sleep): the launch log got a line of that
    queue while launches are in flight (bounded)."""
    await _wait_in_flight(run, conn)
    offset = len(_read_from(launch_log, 0))
    deadline = time.monotonic() + START_DEADLINE
    while f"{queue} ".encode() not in _read_from(launch_log, offset):
        run.check_alive()
        assert time.monotonic() < deadline, (
            f"no launch of {queue} started within {START_DEADLINE}s:\n{run.tail()}")
        await asyncio.sleep(0.002)


def _read_launch_log(path: Path) -> list[tuple[str, str, int]]:
    launches = []
    for line in path.read_text(encoding="utf-8").splitlines():
        queue, job_id, attempt = line.split(" ")
        launches.append((queue, job_id, int(attempt)))
    return launches


def new_run(tmp_path: Path, config_path: Path) -> Run:
    """The daemons of a crash test: ``hipq run`` with this config, the repository on
    its path, logging to ``daemon.log``."""
    env = {k: v for k, v in os.environ.items() if k != "HIPQ_DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return Run(config=config_path, log=tmp_path / "daemon.log", env=env)


async def open_queues(url: str, config_path: Path) -> tuple[Store, Hipq]:
    """The database migrated and the config's queues created, from the test's side."""
    store = await open_store(url, pool_size=2)
    await store.migrate()
    hipq = Hipq(store)
    for queue in load_config(config_path).queues:
        await hipq.create_queue(queue)
    return store, hipq


async def test_sigkill_mid_work_loses_nothing(crash_db: tuple[str, str],
                                              tmp_path: Path) -> None:
    raw_url, url = crash_db
    launch_log = tmp_path / "launches.log"
    launch_log.touch()
    config_path = _write_config(tmp_path, url, launch_log)
    run = new_run(tmp_path, config_path)
    rng = random.Random()
    began = time.monotonic()

    store, hipq = await open_queues(url, config_path)
    conn = await asyncpg.connect(raw_url)
    try:
        for queue in (ALO, AMO):
            await _enqueue(hipq, queue, range(EARLY))
        late = [range(EARLY + i * (JOBS_PER_QUEUE - EARLY) // LATE_CHUNKS,
                      EARLY + (i + 1) * (JOBS_PER_QUEUE - EARLY) // LATE_CHUNKS)
                for i in range(LATE_CHUNKS)]

        # Kills land while jobs are marked running but not confirmed, right after the
        # target was called for such a job, or at a random moment; a few graceful
        # stops mid-work (launches in flight) are mixed in.
        modes = (["kill-marked", f"kill-launching-{ALO}", f"kill-launching-{AMO}",
                  "kill-random"] * KILLS)[:KILLS]
        modes += ["term"] * TERMS
        rng.shuffle(modes)
        for cycle, mode in enumerate(modes):
            before = await _progress(conn)
            run.start()
            if cycle < len(late):  # enqueue while this daemon works (and gets killed)
                for queue in (ALO, AMO):
                    await _enqueue(hipq, queue, late[cycle])
            # Right after the takeover, or well into the work.
            needed = rng.choice([1, rng.randint(1, 150)])
            await _wait_progress(run, conn, before.archived, needed)
            if mode == "kill-random":
                await asyncio.sleep(rng.uniform(0, 0.4))
            elif mode.startswith("kill-launching-"):
                await _wait_launching(run, conn, launch_log, mode.removeprefix("kill-launching-"))
            else:  # marked running, launching or not: either way not confirmed yet
                await _wait_in_flight(run, conn)
            run.check_alive()
            at_stop = await _progress(conn)
            assert at_stop.live > 0, f"{mode} #{cycle + 1} came after all the work was done"
            if mode == "term":
                code = await run.stop()
                assert code == 0, f"graceful stop mid-work exited {code}:\n{run.tail()}"
                run.terms += 1
                # Every launch was let finish and recorded; the leases were released.
                assert await _unconfirmed(conn) == 0, run.tail()
                assert await conn.fetch("SELECT queue, owner FROM leases") == []
            else:
                run.kill()
                run.kills.append(at_stop)

        run.start()
        deadline = time.monotonic() + FINISH_DEADLINE
        while (progress := await _progress(conn)).live > 0:
            run.check_alive()
            assert time.monotonic() < deadline, (
                f"not finished {FINISH_DEADLINE}s after the last restart: {progress}\n"
                f"{run.tail()}")
            await asyncio.sleep(0.05)
        code = await run.stop()
        assert code == 0, f"graceful stop exited {code}:\n{run.tail()}"

        archived = {(r["queue"], r["id"]): r for r in await conn.fetch(
            "SELECT queue, id, status, attempt, result, error FROM archived_jobs")}
        left = await conn.fetchval("SELECT count(*) FROM jobs")
        leases = await conn.fetch("SELECT queue, owner FROM leases")
        attempts = collections.defaultdict(list)
        # a job's history: its rows, then the entry its archived row holds (on
        # PostgreSQL, a try that succeeded by the target's own answer, schema version 13)
        for r in await conn.fetch(
                "SELECT queue, job_id, attempt, outcome, id FROM job_attempts "
                "WHERE outcome <> 'late_response' UNION ALL "
                "SELECT queue, id, attempt, 'succeeded', 9223372036854775807 "
                "FROM archived_jobs WHERE history_folded ORDER BY 5"):
            attempts[(r["queue"], r["job_id"])].append((r["attempt"], r["outcome"]))
    finally:
        run.cleanup()
        await conn.close()
        await store.close()

    duration = time.monotonic() - began
    launches = _read_launch_log(launch_log)
    enqueued = {(q, f"{q}-{n}"): n for q in (ALO, AMO) for n in range(JOBS_PER_QUEUE)}

    # Nothing lost: every acknowledged enqueue is terminal in the archive.
    assert len(run.kills) >= 5
    assert left == 0
    assert set(archived) == set(enqueued)
    assert leases == [], f"graceful stop kept leases: {leases}"
    terminal = {"succeeded", "failed", "expired", "cancelled"}
    assert {r["status"] for r in archived.values()} <= terminal

    # Every launch belongs to a known job; no try was launched twice.
    per_try = collections.Counter(launches)
    assert all((q, i) in enqueued and a >= 1 for q, i, a in per_try), "unknown launch"
    assert [t for t, c in per_try.items() if c > 1] == []
    launched = collections.defaultdict(list)
    for queue, job_id, attempt in launches:
        launched[(queue, job_id)].append(attempt)

    lost_retried = _check_at_least_once(archived, attempts, launched)
    amo_lost, amo_lost_launched = _check_at_most_once(archived, attempts, launched, enqueued)
    relaunched = sum(1 for key, tries in launched.items() if key[0] == ALO and len(tries) > 1)

    summary = (
        f"crash test: {len(run.kills)} SIGKILLs (live jobs at each kill: "
        f"{[k.live for k in run.kills]}), {run.terms} graceful stops mid-work, "
        f"{run.started} daemons; {ALO}: {lost_retried} tries lost and retried, "
        f"{relaunched} jobs launched again; {AMO}: {amo_lost} jobs failed as lost "
        f"({amo_lost_launched} of them after their launch); {len(launches)} launches "
        f"for {len(enqueued)} jobs; {duration:.1f}s")
    print("\n" + summary)  # noqa: T201
    # The kills did catch launches between "running" and "confirmed" on both queues.
    assert relaunched > 0, summary
    assert amo_lost_launched > 0, summary


def _check_at_least_once(archived: dict[Any, Any], attempts: dict[Any, Any],
                         launched: dict[Any, list[int]]) -> int:
    lost = 0
    for key, job in archived.items():
        if key[0] != ALO:
            continue
        n = int(key[1].rsplit("-", 1)[1])
        assert job["status"] == "succeeded", (key, dict(job))
        final = job["attempt"]
        history = attempts[key]
        assert [a for a, _ in history] == list(range(1, final + 1)), (key, history)
        assert history[-1][1] == "succeeded", (key, history)
        assert all(outcome == "lost" for _, outcome in history[:-1]), (key, history)
        lost += len(history) - 1
        assert final in launched[key], (key, final, launched[key])
        assert set(launched[key]) <= set(range(1, final + 1)), (key, launched[key])
        result = job["result"]
        assert result is not None
        assert json.loads(result) == {"n": n, "attempt": final}, (key, result)
    return lost


def _check_at_most_once(archived: dict[Any, Any], attempts: dict[Any, Any],
                        launched: dict[Any, list[int]],
                        enqueued: dict[Any, int]) -> tuple[int, int]:
    lost = lost_launched = 0
    for key, job in archived.items():
        if key[0] != AMO:
            continue
        n = enqueued[key]
        tries = launched.get(key, [])
        assert len(tries) <= 1, f"at_most_once job {key} launched {len(tries)} times"
        assert job["attempt"] == 1, (key, dict(job))
        history = attempts[key]
        assert len(history) == 1, (key, history)  # marked running exactly once
        assert history[0][0] == 1, (key, history)
        outcome = history[0][1]
        if job["status"] == "succeeded":
            assert tries == [1], (key, tries)
            assert n % REFUSE_EVERY != 0, key
        else:
            assert job["status"] == "failed", (key, dict(job))
            if outcome == "lost":
                lost += 1
                lost_launched += len(tries)
            else:  # refused on purpose by the target
                assert tries == [1], (key, tries)
                assert n % REFUSE_EVERY == 0, (key, outcome)
                assert outcome == "response_failed", (key, outcome)
        if not tries:
            assert outcome == "lost", (key, outcome)
    return lost, lost_launched

"""Crash test of in-tick runs (a Python target with ``in_tick: true``): a real
``hipq run`` on PostgreSQL is SIGKILLed again and again, right after its target was
called for a job (the function is mid-run: the job may still be ``queued`` in the
database) or at a random moment, and restarted each time.

The target (``tests.e2e.crash_target:work``) sleeps up to 40 ms, so some tries end
within the tick's 20 ms wait (claimed and archived in one statement) and the others
are claimed after it and end the usual way. Checked afterwards:

* every job succeeded with the result of its last attempt, nothing is left in
  ``jobs``;
* its history holds each attempt 1..N exactly once, the last ``succeeded``, the
  earlier ones ``lost`` (tries claimed first and caught by a kill);
* the last attempt is in the launch log, and no attempt past it was launched;
* a try launched twice (the same attempt) was caught by a kill while it ran in its
  tick (what ``in_tick`` gives up, docs/configuration.md): there are at most as many
  as kills times the queue's concurrency.
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
import time
from pathlib import Path

import asyncpg
import pytest
import yaml

from tests.e2e.test_crash import (
    START_DEADLINE,
    Run,
    _enqueue,
    _progress,
    _read_from,
    _read_launch_log,
    _wait_progress,
    crash_db,  # noqa: F401 (the fixture)
    new_run,
    open_queues,
)

pytestmark = pytest.mark.slow

QUEUE = "crash-in-tick"
JOBS = 4000
KILLS = 4
CONCURRENCY = 50
FINISH_DEADLINE = 120.0


def _write_config(tmp_path: Path, url: str, launch_log: Path) -> Path:
    config = {
        "database": {"url": url, "pool_size": 5},
        "api": {"enabled": False},
        "reconcile": {"interval_seconds": 0.2, "lease_seconds": 2.0},
        "logging": {"level": "INFO"},
        "queues": [{
            "id": QUEUE, "attempts": 20, "concurrency": CONCURRENCY,
            "target": {"kind": "python", "function": "tests.e2e.crash_target:work",
                       "in_tick": True,
                       "options": {"log_path": str(launch_log), "max_sleep": 0.04}},
            "retry": {"strategy": "fixed", "delay_seconds": 0.2},
        }],
    }
    path = tmp_path / "crash.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


async def _wait_launch(run: Run, launch_log: Path) -> None:
    """Poll until the target has just been called (a function is mid-run)."""
    offset = len(_read_from(launch_log, 0))
    deadline = time.monotonic() + START_DEADLINE
    while not _read_from(launch_log, offset):
        run.check_alive()
        assert time.monotonic() < deadline, f"no launch within {START_DEADLINE}s:\n{run.tail()}"
        await asyncio.sleep(0.001)


async def test_sigkill_during_in_tick_runs_loses_nothing(crash_db: tuple[str, str],  # noqa: F811
                                                         tmp_path: Path) -> None:
    raw_url, url = crash_db
    launch_log = tmp_path / "launches.log"
    launch_log.touch()
    config_path = _write_config(tmp_path, url, launch_log)
    run = new_run(tmp_path, config_path)
    rng = random.Random()

    store, hipq = await open_queues(url, config_path)
    conn = await asyncpg.connect(raw_url)
    try:
        await _enqueue(hipq, QUEUE, range(JOBS))
        for cycle in range(KILLS):
            before = await _progress(conn)
            run.start()
            await _wait_progress(run, conn, before.archived, rng.randint(1, 100))
            if cycle % 2 == 0:
                await _wait_launch(run, launch_log)  # a function is mid-run
            else:
                await asyncio.sleep(rng.uniform(0, 0.3))
            run.check_alive()
            at_kill = await _progress(conn)
            assert at_kill.live > 0, f"kill #{cycle + 1} came after all the work was done"
            run.kill()
            run.kills.append(at_kill)
        run.start()
        deadline = time.monotonic() + FINISH_DEADLINE
        while (progress := await _progress(conn)).live > 0:
            run.check_alive()
            assert time.monotonic() < deadline, f"not finished: {progress}\n{run.tail()}"
            await asyncio.sleep(0.05)
        assert await run.stop() == 0, run.tail()
        archived = {r["id"]: r for r in await conn.fetch(
            "SELECT id, status, attempt, result FROM archived_jobs")}
        left = await conn.fetchval("SELECT count(*) FROM jobs")
        attempts: dict[str, list[tuple[int, str]]] = collections.defaultdict(list)
        # a job's history: its rows, then the entry its archived row holds (a try that
        # succeeded in its tick, schema version 11)
        for r in await conn.fetch(
                "SELECT job_id, attempt, outcome, id FROM job_attempts "
                "WHERE outcome <> 'late_response' UNION ALL "
                "SELECT id, attempt, 'succeeded', 9223372036854775807 FROM archived_jobs "
                "WHERE history_folded ORDER BY 4"):
            attempts[r["job_id"]].append((r["attempt"], r["outcome"]))
    finally:
        run.cleanup()
        await conn.close()
        await store.close()

    assert left == 0
    assert set(archived) == {f"{QUEUE}-{n}" for n in range(JOBS)}
    launches = _read_launch_log(launch_log)
    launched: dict[str, list[int]] = collections.defaultdict(list)
    for queue, job_id, attempt in launches:
        assert queue == QUEUE
        launched[job_id].append(attempt)
    lost = 0
    for job_id, job in archived.items():
        n = int(job_id.rsplit("-", 1)[1])
        assert job["status"] == "succeeded", (job_id, dict(job))
        final = job["attempt"]
        history = attempts[job_id]
        assert [a for a, _ in history] == list(range(1, final + 1)), (job_id, history)
        assert history[-1][1] == "succeeded", (job_id, history)
        assert all(outcome == "lost" for _, outcome in history[:-1]), (job_id, history)
        lost += final - 1
        assert final in launched[job_id], (job_id, final, launched[job_id])
        assert set(launched[job_id]) <= set(range(1, final + 1)), (job_id, launched[job_id])
        assert json.loads(job["result"]) == {"n": n, "attempt": final}, job_id
    again = [(j, a) for (j, a), c in collections.Counter(
        (j, a) for _, j, a in launches).items() if c > 1]
    assert len(again) <= KILLS * CONCURRENCY, again
    print(f"\nin-tick crash test: {KILLS} SIGKILLs (live jobs at each: "  # noqa: T201
          f"{[k.live for k in run.kills]}); {lost} tries lost and retried; {len(again)} "
          f"tries run again as the same attempt; {len(launches)} launches for {JOBS} jobs")

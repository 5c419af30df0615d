"""The partner's word's proof (docs/throttling.md, "The partner's word"), as a reusable runner.

A fake partner (``hipq.downstream.partner`` in its own process) promises at most
``C = 10`` requests at once, each answered in 0.1 s (a capacity of 100 accepted
requests per second), and refuses anything beyond with a bare 429 (no
``Retry-After``). One queue, ``partner``, is configured far above it
(``concurrency: 60``, no rate limit, an HTTP target in sync mode, 3 attempts) with
the adaptive and back-off settings under test. ``jobs`` jobs are enqueued with the
batch API into real ``hipq run`` processes (one on a SQLite file or on a fresh
PostgreSQL database; or three on PostgreSQL, the owner of the queue killed with
SIGKILL once a third of the jobs are done), and the run lasts until every job is
terminal. The proof holds when, after the first 10 s (counted from the partner's
first request):

* throttled tries are under 10% of the launches the partner saw,
* the partner accepted at least 70% of its capacity,
* no job failed,
* no attempt was spent on a 429: no throttled try counted as a failed one, and
  every terminal job's ``attempt`` equals the number of its tries that were not
  given back.

Run it alone (JSON on stdout, progress on stderr)::

    .venv/bin/python -m bench.partner_proof --database sqlite
    .venv/bin/python -m bench.partner_proof --database postgresql://... --daemons 3 --kill-one
    .venv/bin/python -m bench.partner_proof --database sqlite --settings defaults

``bench/run --only partner`` runs the three set-ups (:func:`run_phase`); the test
is ``tests/bench/test_partner_proof.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import os
import signal
import sqlite3
import sys
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import psutil

from hipq.downstream.partner import PartnerProcess

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: a module or a script
from common import (
    Daemon,
    drop_database,
    free_port,
    fresh_database,
    hipq_config,
    hipq_daemon,
    loadavg,
    log,
    machine,
    postgres,
)

QUEUE = "partner"
PARTNER_CONCURRENCY = 10
PARTNER_LATENCY_SECONDS = 0.1
CAPACITY_PER_S = PARTNER_CONCURRENCY / PARTNER_LATENCY_SECONDS  # 100 accepted/s
QUEUE_CONCURRENCY = 60
WARMUP_SECONDS = 10.0
KILL_AT = 1 / 3  # share of the jobs done when the owner is killed
POLL_SECONDS = 0.25
STALL_SECONDS = 30.0  # no job done for this long: the run is reported as stalled
BATCH_SIZE = 500

# the goals (docs/throttling.md, "The partner's word")
MAX_THROTTLED_SHARE = 0.10
MIN_ACCEPTED_SHARE = 0.70

# hipq's defaults for the two settings the proof turns (docs/configuration.md)
DEFAULT_SETTINGS: dict[str, dict[str, Any]] = {
    "adaptive": {"min": 1, "increase_every": 20, "decrease": 0.5},
    "backoff": {"initial_seconds": 1.0},
}
# what a user would choose for "a partner that refuses beyond 10 concurrent requests,
# answering in 100 ms, without Retry-After": such a refusal means "one too many right
# now" and a slot frees within one answer time, so wait one answer time (not a
# second) and step back by a quarter, not by half (an overshoot of one in eleven);
# 0.75 still comes down from 60 to 10 in about six rounds of the doubling back-off.
# min and increase_every stay hipq's defaults: nothing here knows the partner's 10.
CHOSEN_SETTINGS: dict[str, dict[str, Any]] = {
    "adaptive": {"min": 1, "increase_every": 20, "decrease": 0.75},
    "backoff": {"initial_seconds": 0.1},
}
SETTINGS = {"defaults": DEFAULT_SETTINGS, "chosen": CHOSEN_SETTINGS}


# -- the database, read from outside the daemons ------------------------------------


@dataclass
class Reader:
    """Read-only SQL on the daemons' database: a SQLite file or a PostgreSQL URL."""

    sqlite_path: Path | None = None
    pg_url: str | None = None
    _conn: asyncpg.Connection | None = None

    async def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if self.sqlite_path is not None:
            return await asyncio.to_thread(self._sqlite_rows, sql)
        if self._conn is None:
            self._conn = await asyncpg.connect(self.pg_url)
        return [tuple(r) for r in await self._conn.fetch(sql)]

    def _sqlite_rows(self, sql: str) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(str(self.sqlite_path), timeout=10)
        try:
            return list(conn.execute(sql).fetchall())
        finally:
            conn.close()

    async def value(self, sql: str) -> Any:
        rows = await self.rows(sql)
        return rows[0][0] if rows else None

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


# -- CPU seconds -----------------------------------------------------------------------


def tree_cpu(pid: int | None, children: bool = False) -> float | None:
    """User + system CPU seconds of ``pid`` (and its live children); None if unreadable."""
    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        procs = [root, *(root.children(recursive=True) if children else [])]
    except psutil.Error:
        return None
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            cpu = proc.cpu_times()
            total += cpu.user + cpu.system
    return total


async def postmaster_pid(url: str) -> int | None:
    """The postmaster of the server at ``url``: the parent of a backend, read while
    that backend lives; None where it cannot be read (another machine)."""
    conn = await asyncpg.connect(url)
    try:
        backend = int(await conn.fetchval("SELECT pg_backend_pid()"))
        with contextlib.suppress(psutil.Error):
            return int(psutil.Process(backend).ppid())
        return None
    finally:
        await conn.close()


# -- one run ------------------------------------------------------------------------------


@dataclass
class Run:
    """What a run saw while it ran."""

    jobs: int
    started: float = 0.0  # epoch: enqueue began
    enqueued_s: float = 0.0
    done_s: float | None = None
    samples: list[tuple[float, int, float | None]] = field(default_factory=list)
    killed: dict[str, Any] | None = None
    stalled_s: float | None = None  # when the run was given up as stalled


def queue_config(partner_url: str, mode: str, settings: dict[str, dict[str, Any]]) -> dict[
        str, Any]:
    return {"id": QUEUE, "concurrency": QUEUE_CONCURRENCY, "attempts": 3,
            "timeout_seconds": 60,
            "target": {"kind": "http", "url": partner_url + "/charge", "mode": mode,
                       "timeout_seconds": 10},
            "adaptive": dict(settings["adaptive"]), "backoff": dict(settings["backoff"])}


def partner_args(mode: str, refuse_as: str, retry_after: str,
                 latency: float = PARTNER_LATENCY_SECONDS) -> list[str]:
    return ["--concurrency", str(PARTNER_CONCURRENCY), "--latency",
            str(latency), "--mode", mode, "--refuse-as", refuse_as,
            "--retry-after", retry_after]


async def enqueue(base: str, jobs: int, prefix: str) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        for start in range(0, jobs, BATCH_SIZE):
            body = {"jobs": [{"id": f"{prefix}-{n}", "data": {"n": n}}
                             for n in range(start, min(start + BATCH_SIZE, jobs))]}
            async with session.post(f"{base}/v1/jobs/{QUEUE}/batch", json=body) as answer:
                out = await answer.json()
                if answer.status != 200:
                    raise SystemExit(f"batch enqueue answered {answer.status}: {out}")


async def kill_owner(reader: Reader, daemons: list[Daemon], run: Run,
                     queue: str = QUEUE) -> bool:
    """SIGKILL the daemon that holds ``queue``'s lease (its pid is in the owner id,
    ``host:pid:suffix``, hipq/daemon.py make_owner_id); False if none holds it."""
    owner = await reader.value(f"SELECT owner FROM leases WHERE queue = '{queue}'")
    if owner is None:
        return False
    pid = int(str(owner).rsplit(":", 2)[1])
    victim = next((d for d in daemons if d.pid == pid and d.proc.returncode is None), None)
    if victim is None:
        return False
    os.kill(victim.pid, signal.SIGKILL)
    await victim.proc.wait()
    run.killed = {"daemon": daemons.index(victim), "pid": pid,
                  "at_s": round(time.time() - run.started, 2)}
    log(f"  killed daemon {daemons.index(victim)} (pid {pid}, the owner) with SIGKILL")
    return True


async def watch(reader: Reader, daemons: list[Daemon], run: Run, *, kill_one: bool,
                within: float) -> None:
    """Poll until every job is terminal (or ``within`` s, or none was done for
    STALL_SECONDS), sampling the done count and the effective concurrency; kill the
    owner once a third is done."""
    deadline = time.monotonic() + within
    progress = (0, time.monotonic())  # (done, when it last grew)
    while time.monotonic() < deadline:
        done = int(await reader.value(
            f"SELECT count(*) FROM archived_jobs WHERE queue = '{QUEUE}'") or 0)
        effective = await reader.value(
            f"SELECT effective FROM queue_state WHERE queue = '{QUEUE}'")
        now = time.time()
        run.samples.append((now, done, None if effective is None else float(effective)))
        if done >= run.jobs:
            run.done_s = now - run.started
            return
        if done > progress[0]:
            progress = (done, time.monotonic())
        elif time.monotonic() - progress[1] > STALL_SECONDS:
            run.stalled_s = round(now - run.started, 1)
            log(f"  stalled: {done:,} of {run.jobs:,} jobs done, none for {STALL_SECONDS:g} s")
            return
        if kill_one and run.killed is None and done >= run.jobs * KILL_AT:
            await kill_owner(reader, daemons, run)
        if not any(d.proc.returncode is None for d in daemons):
            raise SystemExit("every hipq daemon has exited")
        await asyncio.sleep(POLL_SECONDS)


def fresh_sqlite(workdir: Path, name: str) -> Path:
    """``<workdir>/<name>.db``, with no file of an earlier run left."""
    for leftover in workdir.glob(f"{name}.db*"):
        leftover.unlink()
    return workdir / f"{name}.db"


async def run_proof(*, database: str, daemons: int = 1, kill_one: bool = False,
                    jobs: int = 3000, workdir: Path, mode: str = "sync",
                    settings: dict[str, dict[str, Any]] | None = None,
                    refuse_as: str = "429", retry_after: str = "none",
                    within: float = 300.0, name: str = "partner",
                    event_loop: str = "auto",
                    latency: float = PARTNER_LATENCY_SECONDS) -> dict[str, Any]:
    """One proof run (see the module docstring); the report as a dict, with
    ``"passed"`` and ``"criteria"``. ``database``: "sqlite" or a PostgreSQL server
    URL (a fresh database is made on it and dropped after). ``event_loop``: the
    daemons' ``event_loop`` setting (``auto``, hipq's default, is uvloop where
    installed). ``latency``: how long the partner takes to answer (its capacity is
    ``C / latency``)."""
    if daemons > 1 and database == "sqlite":
        raise ValueError("several daemons need PostgreSQL")
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    settings = settings or DEFAULT_SETTINGS
    db_name = f"bench_{name}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    if database == "sqlite":
        sqlite_path = fresh_sqlite(workdir, name)
        db_url, reader = f"sqlite+aiosqlite:///{sqlite_path}", Reader(sqlite_path=sqlite_path)
    else:
        db_url = await fresh_database(database, db_name)
        reader = Reader(pg_url=db_url)
    try:
        report = await _run(db_url, reader, daemons=daemons, kill_one=kill_one, jobs=jobs,
                            workdir=workdir, mode=mode, settings=settings,
                            refuse_as=refuse_as, retry_after=retry_after, within=within,
                            name=name, event_loop=event_loop, latency=latency)
    finally:
        await reader.close()
        if database != "sqlite":
            await drop_database(database, db_name)
    report.update(database="sqlite" if database == "sqlite" else "postgresql",
                  daemons=daemons, kill_one=kill_one)
    return report


async def _run(db_url: str, reader: Reader, *, daemons: int, kill_one: bool, jobs: int,
               workdir: Path, mode: str, settings: dict[str, dict[str, Any]],
               refuse_as: str, retry_after: str, within: float, name: str,
               event_loop: str, latency: float) -> dict[str, Any]:
    load_before = loadavg()
    postmaster = None if reader.pg_url is None else await postmaster_pid(reader.pg_url)
    pg_cpu_before = tree_cpu(postmaster, children=True)
    run = Run(jobs=jobs)
    async with AsyncExitStack() as stack:
        partner = await PartnerProcess.start(*partner_args(mode, refuse_as, retry_after,
                                                                   latency))
        stack.push_async_callback(partner.stop)
        reconcile: dict[str, Any] = {"interval_seconds": 1.0}
        if daemons > 1:
            reconcile["lease_seconds"] = 3.0
        running: list[Daemon] = []
        for n in range(daemons):  # one after the other: the first migrates
            port = free_port()
            config = hipq_config(db_url, port, [queue_config(partner.url, mode, settings)],
                                 reconcile=reconcile)
            config["api"]["public_url"] = f"http://127.0.0.1:{port}"
            config["event_loop"] = event_loop
            running.append(await stack.enter_async_context(
                hipq_daemon(config, workdir, f"{name}-{n}")))
        run.started = time.time()
        await enqueue(running[0].base_url, jobs, name)
        run.enqueued_s = time.time() - run.started
        await watch(reader, running, run, kill_one=kill_one, within=within)
        stats = await partner.stats()
        partner_cpu = tree_cpu(partner.process.pid)
        hipq_cpu = [round(d.rss.cpu_s, 2) for d in running]
        pg_cpu_after = tree_cpu(postmaster, children=True)
        outcome = await read_outcome(reader)
    cpu = {"hipq": hipq_cpu, "partner": None if partner_cpu is None else round(partner_cpu, 2),
           "postgres": None if pg_cpu_before is None or pg_cpu_after is None
           else round(pg_cpu_after - pg_cpu_before, 2)}
    report = summarize(run, stats, outcome, settings=settings, mode=mode, cpu=cpu,
                       load=[load_before, loadavg()], latency=latency)
    report["event_loop"] = event_loop
    return report


# -- what the database says -----------------------------------------------------------------


async def read_outcome(reader: Reader) -> dict[str, Any]:
    """Failed jobs, attempts spent on 429s, the tries by outcome, the learned state."""
    archived = await reader.rows(
        f"SELECT id, status, attempt, history_folded FROM archived_jobs WHERE queue = '{QUEUE}'")
    tries = await reader.rows(
        f"SELECT job_id, attempt, outcome, error FROM job_attempts WHERE queue = '{QUEUE}'")
    live = int(await reader.value(f"SELECT count(*) FROM jobs WHERE queue = '{QUEUE}'") or 0)
    state = await reader.rows(
        f"SELECT effective, throttled_total FROM queue_state WHERE queue = '{QUEUE}'")
    outcomes = collections.Counter(str(t[2]) for t in tries)
    spent: list[str] = []  # throttled tries that counted as a failed try
    kept: dict[str, set[int]] = collections.defaultdict(set)  # job -> attempts not given back
    for job_id, attempt, outcome, error in tries:
        if outcome != "throttled":
            kept[job_id].add(int(attempt))
        elif "in_a_row" not in _json(error):
            spent.append(job_id)
    for job_id, _, attempt, folded in archived:
        if folded:  # the last try is the archived row itself (schema versions 11, 13)
            kept[job_id].add(int(attempt))
    mismatched = [i for i, _, attempt, _ in archived if int(attempt) != len(kept[i])]
    effective, throttled_total = state[0] if state else (None, 0)
    return {"terminal": len(archived), "live": live,
            "statuses": dict(collections.Counter(str(a[1]) for a in archived)),
            "failed_jobs": sum(1 for a in archived if a[1] != "succeeded"),
            "tries_by_outcome": dict(outcomes),
            "throttled_counted_as_failed": len(spent),
            "attempt_mismatches": len(mismatched), "mismatched_examples": mismatched[:5],
            "attempts_spent_on_429s": len(spent) + len(mismatched),
            "final_effective": None if effective is None else float(effective),
            "hipq_throttled_total": int(throttled_total or 0)}


def _json(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if not value:
        return {}
    decoded = json.loads(value)
    return decoded if isinstance(decoded, dict) else {}


# -- the report --------------------------------------------------------------------------------


def timeline(requests: list[list[Any]], t0: float, run: Run) -> list[dict[str, Any]]:
    """Per second from the partner's first request: accepted and refused requests,
    the effective concurrency last sampled in that second, jobs done by its end."""
    seconds: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for epoch, _key, status in requests:
        seconds[int(epoch - t0)]["accepted" if _accepted(status) else "refused"] += 1
    sampled: dict[int, tuple[int, float | None]] = {}
    for epoch, done, effective in run.samples:
        if epoch >= t0:
            sampled[int(epoch - t0)] = (done, effective)
    last = max([*seconds, *sampled], default=-1)
    out, state = [], (0, None)
    for s in range(last + 1):
        state = sampled.get(s, state)
        out.append({"s": s, "accepted": seconds[s]["accepted"], "refused": seconds[s]["refused"],
                    "effective": None if state[1] is None else math.floor(state[1] + 1e-9),
                    "done": state[0]})
    return out


def _accepted(status: Any) -> bool:
    return status in (200, 202)


def after_warmup(requests: list[list[Any]], t0: float,
                 latency: float = PARTNER_LATENCY_SECONDS) -> dict[str, Any]:
    """Launches, refusals and the accepted rate from ``t0 + WARMUP_SECONDS`` to the
    end of the last accepted request."""
    start = t0 + WARMUP_SECONDS
    late = [r for r in requests if r[0] >= start]
    accepted = [r for r in late if _accepted(r[2])]
    end = max((r[0] for r in accepted), default=start) + latency
    span = end - start
    refused = len(late) - len(accepted)
    rate = len(accepted) / span if span > 1.0 else None
    return {"seconds": round(span, 2), "launches": len(late), "accepted": len(accepted),
            "refused": refused,
            "throttled_share": round(refused / len(late), 4) if late else None,
            "accepted_per_s": None if rate is None else round(rate, 1),
            "accepted_share_of_capacity": None if rate is None
            else round(rate * latency / PARTNER_CONCURRENCY, 3)}


def criteria(after: dict[str, Any], outcome: dict[str, Any], jobs: int) -> dict[str, bool]:
    share, capacity = after["throttled_share"], after["accepted_share_of_capacity"]
    return {
        "throttled_under_10pct": share is not None and share < MAX_THROTTLED_SHARE,
        "accepted_at_least_70pct": capacity is not None and capacity >= MIN_ACCEPTED_SHARE,
        "no_failed_job": outcome["failed_jobs"] == 0 and outcome["terminal"] == jobs,
        "no_attempt_spent_on_429": outcome["attempts_spent_on_429s"] == 0,
    }


def summarize(run: Run, stats: dict[str, Any], outcome: dict[str, Any], *,
              settings: dict[str, dict[str, Any]], mode: str, cpu: dict[str, Any],
              load: list[list[float]],
              latency: float = PARTNER_LATENCY_SECONDS) -> dict[str, Any]:
    requests = stats["requests"]
    t0 = requests[0][0] if requests else run.started
    after = after_warmup(requests, t0, latency)
    checks = criteria(after, outcome, run.jobs)
    wall = run.done_s
    return {
        "passed": all(checks.values()), "criteria": checks,
        "jobs": run.jobs, "mode": mode, "settings": settings,
        "partner": {"concurrency": PARTNER_CONCURRENCY, "latency_s": latency,
                    "capacity_per_s": PARTNER_CONCURRENCY / latency},
        "launches": len(requests), "accepted": stats["accepted"],
        "throttled": stats["refused"], "partner_max_in_flight": stats["max_in_flight"],
        "after_warmup": after, **outcome,
        "final_effective_concurrency": None if outcome["final_effective"] is None
        else math.floor(outcome["final_effective"] + 1e-9),
        "enqueue_s": round(run.enqueued_s, 2),
        "first_request_after_s": round(t0 - run.started, 2),
        "wall_s": None if wall is None else round(wall, 2),
        "overall_accepted_per_s": None if not wall else round(stats["accepted"] / wall, 1),
        "killed": run.killed, "stalled_after_s": run.stalled_s, "cpu_s": cpu, "machine": machine(),
        "loadavg_before": load[0], "loadavg_after": load[1],
        "timeline": timeline(requests, t0, run),
    }


def brief(report: dict[str, Any]) -> str:
    """One line: the four numbers and the verdict."""
    after = report["after_warmup"]
    share = after["throttled_share"]
    capacity = after["accepted_share_of_capacity"]
    return (f"{report['database']} x{report['daemons']}"
            + (" kill" if report["kill_one"] else "")
            + f": after 10 s throttled {'-' if share is None else f'{share:.1%}'}"
            f", accepted {'-' if capacity is None else f'{capacity:.0%}'} of capacity"
            f" ({after['accepted_per_s']}/s), failed {report['failed_jobs']}, attempts "
            f"on 429s {report['attempts_spent_on_429s']}; launches {report['launches']:,}, "
            f"throttled {report['throttled']:,}, wall {report['wall_s']} s, final effective "
            f"{report['final_effective_concurrency']} -> "
            + ("PASSED" if report["passed"] else "NOT passed"))


# -- the bench/run phase -------------------------------------------------------------------------

SETUPS = (("sqlite", 1, False), ("postgresql", 1, False), ("postgresql", 3, True))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--partner-jobs", type=int, default=3000,
                   help="jobs of each partner-proof run (default 3000)")
    p.add_argument("--partner-settings", default="chosen",
                   help="comma-separated: chosen (the proof's settings), defaults "
                        "(hipq's adaptive/backoff defaults); default chosen")
    p.add_argument("--partner-event-loop", choices=["auto", "uvloop", "asyncio"],
                   default="auto",
                   help="the daemons' event_loop setting in the partner proof (default auto, "
                        "hipq's default)")


async def run_phase(args: argparse.Namespace, workdir: Path,
                    notes: list[str]) -> dict[str, Any]:
    """The ``partner`` phase of bench/run: SQLite, PostgreSQL, PostgreSQL x3 with the
    owner killed, on a PostgreSQL with stock durability, per settings asked for."""
    out: dict[str, Any] = {}
    chosen = [s for s in args.partner_settings.split(",") if s]
    if set(chosen) - set(SETTINGS):
        raise SystemExit(f"--partner-settings: one of {sorted(SETTINGS)}, not {chosen}")
    with postgres(args.durable_database_url, durable=True) as server:
        for which in chosen:
            for database, daemons, kill in SETUPS:
                key = f"{which}_{database}_x{daemons}" + ("_kill" if kill else "")
                log(f"  partner proof {key} ...")
                report = await run_proof(
                    database="sqlite" if database == "sqlite" else server, daemons=daemons,
                    kill_one=kill, jobs=args.partner_jobs, workdir=workdir,
                    settings=SETTINGS[which], name=key, event_loop=args.partner_event_loop)
                log(f"    {brief(report)}")
                if not report["passed"]:
                    notes.append(f"partner proof {key} did not pass: {report['criteria']}")
                out[key] = report
    return {"partner": out}


def summary(details: dict[str, Any]) -> dict[str, Any]:
    """Headline keys for results.json: the chosen settings' runs (None if not run)."""
    runs = details.get("partner", {})

    def pct(key: str, field_: str) -> float | None:
        run = runs.get(key)
        share = None if run is None else run["after_warmup"][field_]
        return None if share is None else round(100 * share, 1)

    kill = "chosen_postgresql_x3_kill"
    return {
        "partner_passed": (all(r["passed"] for k, r in runs.items() if k.startswith("chosen"))
                           if any(k.startswith("chosen") for k in runs) else None),
        "partner_throttled_pct_x3_kill": pct(kill, "throttled_share"),
        "partner_accepted_pct_x3_kill": pct(kill, "accepted_share_of_capacity"),
        "partner_failed_jobs_x3_kill": None if kill not in runs else runs[kill]["failed_jobs"],
        "partner_attempts_on_429s_x3_kill":
            None if kill not in runs else runs[kill]["attempts_spent_on_429s"],
    }


def print_table(details: dict[str, Any]) -> None:
    runs = details.get("partner")
    if not runs:
        return
    print("\npartner proof (docs/throttling.md): C=10 at 0.1 s (100/s), 429 without Retry-After; "
          "after the first 10 s:")
    print(f"  {'run':<28} {'throttled':>9} {'accepted':>9} {'failed':>6} {'429 att.':>8} "
          f"{'launches':>8} {'wall s':>7} {'eff.':>4}  CPU s hipq / partner / PG  verdict")
    for key, r in runs.items():
        a, cpu = r["after_warmup"], r["cpu_s"]
        share, cap = a["throttled_share"], a["accepted_share_of_capacity"]
        print(f"  {key:<28} {'-' if share is None else f'{share:.1%}':>9} "
              f"{'-' if cap is None else f'{cap:.0%}':>9} {r['failed_jobs']:>6} "
              f"{r['attempts_spent_on_429s']:>8} {r['launches']:>8,} "
              f"{r['wall_s'] if r['wall_s'] is not None else '-':>7} "
              f"{r['final_effective_concurrency'] or '-':>4}  "
              f"{'+'.join(f'{c:.1f}' for c in cpu['hipq'])} / {cpu['partner']} / "
              f"{cpu['postgres'] if cpu['postgres'] is not None else '-'}  "
              + ("passed" if r["passed"] else "NOT passed"))


# -- command line -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.partner_proof",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--database", default="sqlite", help='"sqlite" or a PostgreSQL server URL')
    p.add_argument("--daemons", type=int, default=1)
    p.add_argument("--kill-one", action="store_true")
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--mode", choices=["sync", "callback"], default="sync")
    p.add_argument("--settings", choices=sorted(SETTINGS), default="chosen")
    p.add_argument("--adaptive", type=json.loads, default=None,
                   help='JSON over the settings\' adaptive, e.g. \'{"decrease": 0.9}\'')
    p.add_argument("--backoff", type=json.loads, default=None,
                   help='JSON over the settings\' backoff, e.g. \'{"initial_seconds": 0.1}\'')
    p.add_argument("--workdir", type=Path, default=Path(f"/tmp/hipq-partner-{os.getpid()}"))
    p.add_argument("--event-loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                   help="the daemons' event_loop setting (default auto, hipq's default)")
    p.add_argument("--within", type=float, default=300.0,
                   help="give up when the jobs are not all terminal after this many s")
    p.add_argument("--timeline", action="store_true", help="keep the per-second timeline")
    args = p.parse_args(argv)
    base = SETTINGS[args.settings]
    settings = {"adaptive": {**base["adaptive"], **(args.adaptive or {})},
                "backoff": {**base["backoff"], **(args.backoff or {})}}
    report = asyncio.run(run_proof(database=args.database, daemons=args.daemons,
                                   kill_one=args.kill_one, jobs=args.jobs,
                                   workdir=args.workdir, mode=args.mode, settings=settings,
                                   event_loop=args.event_loop, within=args.within))
    log(brief(report))
    if not args.timeline:
        report.pop("timeline")
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()

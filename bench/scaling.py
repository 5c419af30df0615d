"""Scaling figures: 1, 2 and 4 ``hipq run`` daemons on one PostgreSQL, 8 queues,
HTTP target in callback mode (the downstream is ``bench/chaos_downstream.py``
without failures, answering at once).

    python -m bench.scaling [--daemons 1,2,4] [--jobs-per-queue 2500] [--idle-seconds 20]
                            [--test-settings] [--json out.json]

One throwaway PostgreSQL with stock durability (fsync, synchronous_commit and
full_page_writes on; ``--test-settings`` turns the three off) and
``pg_stat_statements`` preloaded when ``scripts/pg-ephemeral`` can (bench/common.py's
``postgres``). For each daemon count, on a fresh database:

* idle: ``--idle-seconds`` with nothing to do once the queues are spread: the CPU of
  each process per second (ticks, lease and heartbeat renewals) and PostgreSQL's
  statements per second;
* throughput: ``8 x --jobs-per-queue`` jobs enqueued in batches of 500 through the
  daemons in turn, timed from the first batch until every job is archived; over
  that window, the CPU seconds and CPU ms per job of each hipq daemon, of
  PostgreSQL (the postmaster and all its children), of the downstream and of this
  driver, the CPU the machine spent outside them (``other``), the machine's idle,
  iowait and steal shares, the load average before and after, and PostgreSQL's
  statements, statement time and WAL bytes per job (bench/pg_costs.py) and the
  statements run most (``top_statements``). It fails with where the jobs are when
  nothing is archived for 60 s;
* latency: 200 single PUTs at 40/s, each sent to a daemon that does **not** own
  the job's queue (with one daemon: to the owner), enqueue -> launch at the
  downstream (p50, p99), woken through LISTEN/NOTIFY; the CPU ms per job of each
  process over that window too.

Prints a table on stderr and a JSON document on stdout (and into ``--json``). On a
2-core machine the daemons, PostgreSQL, the downstream and this driver share the
cores: read the figures as what adding processes costs there, not as what more
cores would give.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: a module or a script
from common import ROOT, free_port, fresh_database, loadavg, machine, postgres
from pg_costs import PgCosts
from roundtrip import CpuMeter, postmaster_pid

QUEUES = [f"s{i}" for i in range(8)]
BATCH = 500
LATENCY_JOBS = 200
LATENCY_RATE = 40.0
POLL_SECONDS = 0.1
TOP_STATEMENTS = 15  # the statements run most, in the JSON
STALL_SECONDS = 60  # the throughput fails when nothing is archived for this long


def _config(url: str, port: int, downstream: str) -> dict[str, Any]:
    return {
        "database": {"url": url},
        "api": {"port": port},
        "reconcile": {"interval_seconds": 5.0, "lease_seconds": 3.0},
        "logging": {"level": "WARNING"},
        "queues": [{"id": q, "concurrency": 50, "attempts": 3,
                    "target": {"kind": "http", "url": downstream + "/launch/{queue}/{id}",
                               "mode": "callback", "timeout_seconds": 5}} for q in QUEUES],
    }


def _spawn(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "HIPQ_DATABASE_URL"}
    with log.open("ab") as out:
        return subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)


def _downstream(ports: list[int]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench/chaos_downstream.py"),
                             "--daemons", ",".join(map(str, ports)), "--fail", "0",
                             "--max-delay", "0"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, "http://127.0.0.1:" + proc.stdout.readline().strip().split("=")[1]


async def _fetch(pg: str, query: str) -> list[Any]:
    conn = await asyncpg.connect(pg)
    try:
        return list(await conn.fetch(query))
    finally:
        await conn.close()


async def _wait(check: Any, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(POLL_SECONDS)
    raise TimeoutError("not within the time allowed")


# -- CPU accounting -------------------------------------------------------------------


class MachineMeter:
    """The whole machine's CPU between :meth:`start` and :meth:`stop` (/proc/stat
    through psutil): shares of idle, iowait and steal time, and the core-seconds
    spent busy (user, nice, system, irq, softirq; guest time is inside user)."""

    FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

    def start(self) -> None:
        self._begin = psutil.cpu_times()
        self._wall = time.monotonic()

    def stop(self) -> dict[str, float]:
        end, begin = psutil.cpu_times(), self._begin
        delta = {f: getattr(end, f, 0.0) - getattr(begin, f, 0.0) for f in self.FIELDS}
        total = sum(delta.values()) or 1.0
        busy = total - delta["idle"] - delta["iowait"] - delta["steal"]
        return {"wall_s": round(time.monotonic() - self._wall, 3),
                "busy_cpu_s": round(busy, 3),
                "idle_pct": round(100 * delta["idle"] / total, 1),
                "iowait_pct": round(100 * delta["iowait"] / total, 1),
                "steal_pct": round(100 * delta["steal"] / total, 1)}


class Window:
    """CPU of every process of one daemon count over one window: each hipq daemon,
    PostgreSQL (postmaster and children), the downstream, this driver, and the
    machine as a whole (``other``: busy CPU outside those processes)."""

    def __init__(self, daemons: list[int], postmaster: int, downstream: int) -> None:
        self.names = [f"hipq{n}" for n in range(len(daemons))]
        trees = {name: (pid, True) for name, pid in zip(self.names, daemons, strict=True)}
        self.cpu = CpuMeter(**trees, postgres=(postmaster, True),
                            downstream=(downstream, False), driver=(os.getpid(), False))
        self.machine = MachineMeter()
        self.load_before: list[float] = []

    def start(self) -> None:
        self.load_before = loadavg()
        self.machine.start()
        self.cpu.start()

    def stop(self, jobs: int) -> dict[str, Any]:
        seconds = self.cpu.stop()
        whole = self.machine.stop()
        hipq = sum(seconds[n] for n in self.names)
        seconds = {**seconds, "hipq_all": round(hipq, 3),
                   "other": round(whole["busy_cpu_s"] - sum(seconds.values()), 3)}
        return {"cpu_s": seconds,
                "cpu_ms_per_job": {k: round(1000 * v / max(jobs, 1), 3)
                                   for k, v in seconds.items()},
                "machine": whole, "load_before": self.load_before, "load_after": loadavg()}


# -- one daemon count -----------------------------------------------------------------


async def measure(server: str, daemons: int, jobs_per_queue: int, idle_seconds: float,
                  workdir: Path) -> dict[str, Any]:
    name = f"hipq_scaling_{daemons}"
    pg = await fresh_database(server, name)
    url = "postgresql+asyncpg://" + pg.split("://", 1)[1]
    ports = [free_port() for _ in range(daemons)]
    down, down_url = _downstream(ports)
    procs = []
    try:
        for n, port in enumerate(ports):
            path = workdir / f"scaling-{daemons}-{n}.yaml"
            path.write_text(yaml.safe_dump(_config(url, port, down_url)), encoding="utf-8")
            procs.append(_spawn([sys.executable, "-m", "hipq", "-c", str(path), "run"],
                                workdir / f"scaling-{daemons}-{n}.log"))
            if n == 0:
                await asyncio.sleep(2)  # the first one migrates
        share = math.ceil(len(QUEUES) / daemons)

        async def spread() -> bool:
            try:
                rows = await _fetch(pg, "SELECT owner, count(*) AS n FROM leases "
                                        "WHERE expires_at > now() GROUP BY owner")
            except asyncpg.PostgresError:
                return False
            return (len(rows) == daemons and sum(r["n"] for r in rows) == len(QUEUES)
                    and all(r["n"] <= share for r in rows))

        await _wait(spread, 30)
        owners = {r["queue"]: int(r["owner"].split(":")[-2]) for r in await _fetch(
            pg, "SELECT queue, owner FROM leases")}
        port_of_pid = {p.pid: port for p, port in zip(procs, ports, strict=True)}
        window = Window([p.pid for p in procs], await postmaster_pid(server), down.pid)
        out: dict[str, Any] = {"daemons": daemons, "jobs_per_queue": jobs_per_queue,
                               "jobs": jobs_per_queue * len(QUEUES)}
        if idle_seconds > 0:
            out["idle"] = await _idle(server, name, window, idle_seconds)
        async with aiohttp.ClientSession() as session:
            out["throughput"] = await _throughput(session, server, name, pg, window, ports,
                                                  jobs_per_queue)
            out["jobs_per_s"] = out["throughput"]["jobs_per_s"]
            window.start()
            latency = await _latency(session, ports, owners, port_of_pid, down_url)
            out["latency"] = {**latency, **window.stop(latency["latency_jobs"])}
        return out
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
        down.kill()
        down.wait()


async def _idle(server: str, database: str, window: Window, seconds: float) -> dict[str, Any]:
    costs = PgCosts(server, database)
    await costs.start()
    window.start()
    await asyncio.sleep(seconds)
    cpu = window.stop(1)
    pg = await costs.stop(1)
    per_s = {k: round(1000 * v / seconds, 2) for k, v in cpu.pop("cpu_s").items()}
    del cpu["cpu_ms_per_job"]
    statements = pg.get("statements_per_job")
    return {"seconds": seconds, "cpu_ms_per_s": per_s,
            "statements_per_s": None if statements is None else round(statements / seconds, 1),
            "wal_bytes_per_s": round(pg["wal_bytes_per_job"] / seconds), **cpu}


async def _throughput(session: aiohttp.ClientSession, server: str, database: str, pg: str,
                      window: Window, ports: list[int], per_queue: int) -> dict[str, Any]:
    total = per_queue * len(QUEUES)
    bodies = [(q, json.dumps({"jobs": [{"id": f"t{i}", "data": {}}
                                       for i in range(start, min(per_queue, start + BATCH))]}))
              for q in QUEUES for start in range(0, per_queue, BATCH)]
    await _reset_statements(server)
    costs = PgCosts(server, database)
    await costs.start()
    poll = await asyncpg.connect(pg)  # one connection: a backend per poll would escape the meter
    try:
        window.start()
        started = time.monotonic()
        for n, (q, body) in enumerate(bodies):
            async with session.post(f"http://127.0.0.1:{ports[n % len(ports)]}/v1/jobs/{q}/batch",
                                    data=body, headers={"Content-Type": "application/json"}
                                    ) as answer:
                assert answer.status == 200, await answer.text()
        enqueued = time.monotonic() - started

        progress = [0, time.monotonic()]  # archived, when it last moved

        async def done() -> bool:
            archived = int(await poll.fetchval("SELECT count(*) FROM archived_jobs"))
            if archived != progress[0]:
                progress[:] = [archived, time.monotonic()]
            elif time.monotonic() - progress[1] > STALL_SECONDS:
                raise TimeoutError(f"{archived} of {total} archived, no progress for "
                                   f"{STALL_SECONDS} s: {await _state(poll)}")
            return archived >= total

        await _wait(done, 600)
        elapsed = time.monotonic() - started
        cpu = window.stop(total)
    finally:
        await poll.close()
    return {"jobs_per_s": round(total / elapsed), "seconds": round(elapsed, 2),
            "enqueue_seconds": round(enqueued, 2), **cpu, "postgres": await costs.stop(total),
            "top_statements": await _top_statements(server, database, total)}


async def _reset_statements(server: str) -> None:
    """Empty ``pg_stat_statements`` (cluster-wide: one workload runs at a time)."""
    conn = await asyncpg.connect(server)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await conn.execute("SELECT pg_stat_statements_reset()")
    except asyncpg.PostgresError:
        pass  # not preloaded: no statement figures
    finally:
        await conn.close()


async def _top_statements(server: str, database: str, jobs: int) -> list[dict[str, Any]]:
    """The statements run most in ``database`` since the reset: calls and execution
    ms per job, the text cut at 90 characters."""
    conn = await asyncpg.connect(server)
    try:
        rows = await conn.fetch(
            "SELECT s.calls, s.total_exec_time AS ms, "
            "regexp_replace(s.query, '\\s+', ' ', 'g') AS q "
            "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = $1 ORDER BY s.calls DESC LIMIT $2", database, TOP_STATEMENTS)
    except asyncpg.PostgresError:
        return []
    finally:
        await conn.close()
    return [{"calls_per_job": round(r["calls"] / jobs, 4),
             "exec_ms_per_job": round(r["ms"] / jobs, 4), "query": r["q"][:90]} for r in rows]


async def _state(conn: Any) -> dict[str, Any]:
    """Where the jobs are, when the throughput stalls."""
    jobs = await conn.fetch("SELECT queue, status, count(*) AS n FROM jobs GROUP BY 1, 2 "
                            "ORDER BY 1, 2")
    leases = await conn.fetch("SELECT queue, owner, expires_at > now() AS live FROM leases "
                              "ORDER BY 1")
    inbox = await conn.fetchval("SELECT count(*) FROM response_inbox WHERE applied_at IS NULL")
    return {"jobs": [tuple(r) for r in jobs], "leases": [tuple(r) for r in leases],
            "inbox_pending": inbox}


async def _latency(session: aiohttp.ClientSession, ports: list[int], owners: dict[str, int],
                   port_of_pid: dict[int, int], down_url: str) -> dict[str, Any]:
    sent: dict[str, float] = {}
    for i in range(LATENCY_JOBS):
        q = QUEUES[i % len(QUEUES)]
        owner_port = port_of_pid.get(owners[q])
        others = [p for p in ports if p != owner_port] or ports
        job_id = f"l{i}"
        sent[f"{q}/{job_id}"] = time.time()
        async with session.put(f"http://127.0.0.1:{others[i % len(others)]}/v1/jobs/{q}/"
                               f"{job_id}", json={"data": {}}) as answer:
            assert answer.status == 201, await answer.text()
        await asyncio.sleep(1 / LATENCY_RATE)
    await asyncio.sleep(2)
    async with session.get(down_url + "/_dump") as answer:
        dump = await answer.json()
    arrived = {f"{q}/{i}": at for q, i, _, at in dump["launches"] if i.startswith("l")}
    waits = sorted((arrived[k] - sent[k]) * 1000 for k in sent if k in arrived)
    return {"latency_jobs": len(waits),
            "enqueue_to_launch_p50_ms": round(statistics.median(waits), 1),
            "enqueue_to_launch_p99_ms": round(waits[int(len(waits) * 0.99) - 1], 1)}


# -- the run --------------------------------------------------------------------------


async def _server_settings(server: str) -> dict[str, Any]:
    conn = await asyncpg.connect(server)
    try:
        out: dict[str, Any] = {s: await conn.fetchval(f"SHOW {s}") for s in (
            "server_version", "fsync", "synchronous_commit", "full_page_writes",
            "shared_preload_libraries")}
    finally:
        await conn.close()
    out["stock_durability"] = (out["fsync"], out["synchronous_commit"],
                               out["full_page_writes"]) == ("on", "on", "on")
    return out


async def main_async(counts: list[int], per_queue: int, idle_seconds: float, durable: bool,
                     workdir: Path) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m bench.scaling", *sys.argv[1:]]),
        "machine": machine(), "load_at_start": loadavg()}
    with postgres(None, durable=durable) as server:
        doc["postgres"] = await _server_settings(server)
        doc["runs"] = [await measure(server, n, per_queue, idle_seconds, workdir)
                       for n in counts]
    doc["load_at_end"] = loadavg()
    return doc


def table(doc: dict[str, Any]) -> str:
    """The compact view: per daemon count, the throughput window's CPU ms per job."""
    m, pg = doc["machine"], doc["postgres"]
    lines = [f"{m['cpu']} x {m['cores']} cores; PostgreSQL {pg['server_version']}, fsync "
             f"{pg['fsync']}, synchronous_commit {pg['synchronous_commit']}, "
             f"full_page_writes {pg['full_page_writes']}; load at start "
             f"{' / '.join(map(str, doc['load_at_start']))}",
             "daemons  jobs/s  p50/p99 ms    CPU ms per job: hipq each (sum) | postgres | "
             "downstream | driver | other   idle%  steal%  load 1m before->after  "
             "stmts/job  WAL B/job"]
    for run in doc["runs"]:
        t, lat = run["throughput"], run["latency"]
        per = t["cpu_ms_per_job"]
        each = "+".join(f"{per[f'hipq{n}']:.2f}" for n in range(run["daemons"]))
        stmts = t["postgres"].get("statements_per_job")
        lines.append(
            f"{run['daemons']:>7}  {t['jobs_per_s']:>6}  "
            f"{lat['enqueue_to_launch_p50_ms']:>5}/{lat['enqueue_to_launch_p99_ms']:<6} "
            f"{each} ({per['hipq_all']:.2f}) | {per['postgres']:.2f} | "
            f"{per['downstream']:.2f} | {per['driver']:.2f} | {per['other']:.2f}   "
            f"{t['machine']['idle_pct']:>5}  {t['machine']['steal_pct']:>6}  "
            f"{t['load_before'][0]} -> {t['load_after'][0]}  "
            f"{'-' if stmts is None else stmts}  {t['postgres']['wal_bytes_per_job']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--daemons", default="1,2,4")
    parser.add_argument("--jobs-per-queue", type=int, default=2500)
    parser.add_argument("--idle-seconds", type=float, default=20.0,
                        help="the idle window before the throughput (0: none)")
    parser.add_argument("--test-settings", action="store_true",
                        help="PostgreSQL with fsync, synchronous_commit and "
                             "full_page_writes off (default: stock durability)")
    parser.add_argument("--workdir", type=Path, default=Path("bench/.logs"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    doc = asyncio.run(main_async([int(n) for n in args.daemons.split(",")],
                                 args.jobs_per_queue, args.idle_seconds,
                                 not args.test_settings, args.workdir.resolve()))
    sys.stderr.write(table(doc) + "\n")
    text = json.dumps(doc, indent=2)
    sys.stdout.write(text + "\n")
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""bench/run's ``kafka-c1000`` and ``kafka-unlimited`` phases (issue 28): Kafka round trips
under load, against a responder written with confluent-kafka
(bench/kafka_confluent_responder.py, its own process), on PostgreSQL with stock
durability and a throwaway Tansu broker (its own process).

N jobs are batch-enqueued into a paused queue with a Kafka target (``kafka-c1000``: the
queue's throttler ``concurrency: 1000``; ``kafka-unlimited``: none), matched by the
template ``{value.result.orderId}:{value.result.version}`` (or the header, with
``--kafka-match header``); the queue is resumed and timed until all N are archived.

Reported per run:

* completed jobs/s: N / (the last ``finished_at`` - the resume);
* the round trip under load, per job, from the archived rows: ``finished_at -
  launched_at`` (both are the ``now`` of a tick: the tick that claimed the job and the
  tick that applied its response and archived it), p50/p99/max in ms; and where that
  time goes, from the timestamps the responder puts in the result (``result.t``: the
  launch message's timestamp, set by hipq's producer when the launch was handed to it,
  and when the responder got it) and the response's inbox row (``received_at``: when
  hipq's consumer had it, before its insert; ``applied_at``: the tick that applied it):
  claim -> handed to the producer -> at the responder -> in hipq's consumer -> applied;
* CPU seconds over the window (resume to all archived) of hipq, PostgreSQL (the
  postmaster and its children), the responder and the broker, and per job in ms;
* the machine's idle share over the window (``psutil.cpu_times()``: idle + iowait over
  the total, all cores), and the load average before and after.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import psutil
from common import (
    BENCH,
    PYTHON,
    drop_database,
    free_port,
    fresh_database,
    hipq_config,
    hipq_daemon,
    loadavg,
    log,
    pcts,
)
from hipq_scenarios import enqueue_batches
from kafka_responder import KIT_TEMPLATE
from pg_costs import PgCosts, pg_per_job, top_statements
from roundtrip import (
    ORDER_TEMPLATE_REQUEST,
    CpuMeter,
    child,
    create_topics,
    postmaster_pid,
    wait_archived,
    wait_for_log,
)

PHASES = ("kafka-c1000", "kafka-unlimited")
CONCURRENCY = {"kafka-c1000": 1000, "kafka-unlimited": None}
GOALS = {"kafka-c1000": {"jobs_per_s": 6000, "p50_ms": 150},
         "kafka-unlimited": {"jobs_per_s": 10000}}

_STAGES = """
SELECT a.id,
       extract(epoch FROM a.launched_at)::float8 * 1000 AS claimed,
       (a.result -> 't' ->> 0)::float8 AS produced,
       (a.result -> 't' ->> 1)::float8 AS responder,
       extract(epoch FROM i.received_at)::float8 * 1000 AS consumed,
       extract(epoch FROM i.applied_at)::float8 * 1000 AS applied,
       extract(epoch FROM a.finished_at)::float8 * 1000 AS finished
FROM archived_jobs a
LEFT JOIN response_inbox i ON i.correlation_key = a.correlation_key AND i.outcome = 'applied'
WHERE a.queue = $1 AND a.status = 'succeeded'
"""


def broker_pid(bootstrap: str) -> int | None:
    """The process listening on the broker's port (Tansu), if it is on this machine."""
    port = int(bootstrap.rsplit(":", 1)[1])
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                return conn.pid
    except psutil.Error:
        return None
    return None


def _all_cpu() -> dict[int, tuple[float, str]]:
    out = {}
    for proc in psutil.process_iter(["name"]):
        try:
            cpu = proc.cpu_times()
        except psutil.Error:
            continue
        out[proc.pid] = (cpu.user + cpu.system, proc.info["name"] or "?")
    return out


class IdleMeter:
    """The machine over the window: its idle share (idle + iowait over all CPU time,
    every core), its busy CPU seconds, and the processes that used the most of it
    (anything else running on the machine shows there)."""

    def start(self) -> None:
        self._start = psutil.cpu_times()
        self._procs = _all_cpu()

    def stop(self) -> dict[str, Any]:
        end, procs = psutil.cpu_times(), _all_cpu()
        spent = {f: getattr(end, f) - getattr(self._start, f) for f in end._fields
                 if f not in ("guest", "guest_nice")}  # already counted in user / nice
        total = sum(spent.values())
        idle = spent.get("idle", 0.0) + spent.get("iowait", 0.0)
        by_name: dict[str, float] = {}
        for pid, (cpu, name) in procs.items():
            before = self._procs.get(pid)
            used = cpu - (before[0] if before is not None and before[1] == name else 0.0)
            by_name[name] = by_name.get(name, 0.0) + used
        top = sorted(by_name.items(), key=lambda kv: -kv[1])[:6]
        return {"idle_share": round(idle / total, 3) if total > 0 else 0.0,
                "busy_cpu_s": round(total - idle, 2),
                "top_processes_cpu_s": {name: round(cpu, 2) for name, cpu in top}}


async def leftovers(conn: asyncpg.Connection, queue: str) -> dict[str, Any]:
    """What became of the jobs that were not archived (an incomplete run)."""
    jobs = await conn.fetch("SELECT status, launch_confirmed, count(*) AS n FROM jobs "
                            "WHERE queue = $1 GROUP BY 1, 2", queue)
    inbox = await conn.fetch("SELECT coalesce(outcome, 'pending') AS outcome, count(*) AS n "
                             "FROM response_inbox GROUP BY 1")
    return {"jobs": {f"{r['status']}/confirmed={r['launch_confirmed']}": r["n"] for r in jobs},
            "inbox": {r["outcome"]: r["n"] for r in inbox}}


def stage_breakdown(rows: list[asyncpg.Record]) -> dict[str, Any]:
    """Per-stage percentiles (ms) of the archived jobs' timestamps (see module doc)."""
    round_trip = [r["finished"] - r["claimed"] for r in rows]
    stages: dict[str, list[float]] = {"claim_to_producer": [], "producer_to_responder": [],
                                      "responder_to_consumer": [], "consumer_to_applied": []}
    for r in rows:
        if r["produced"] is None or r["consumed"] is None or r["applied"] is None:
            continue
        stages["claim_to_producer"].append(r["produced"] - r["claimed"])
        stages["producer_to_responder"].append(r["responder"] - r["produced"])
        stages["responder_to_consumer"].append(r["consumed"] - r["responder"])
        stages["consumer_to_applied"].append(r["applied"] - r["consumed"])
    return {"round_trip_ms": pcts(round_trip),
            "stages_ms": {k: pcts(v) for k, v in stages.items()}}


async def kafka_load(server: str, workdir: Path, *, phase: str, jobs: int, within: float,
                     bootstrap: str, name: str, match: str = "template",
                     settings: dict[str, Any] | None = None,
                     py_spy: bool = False) -> dict[str, Any]:
    """One run of ``phase`` (kafka-c1000 | kafka-unlimited); see the module doc."""
    concurrency = CONCURRENCY[phase]
    db = f"bench_{name.replace('-', '_')}"
    url = await fresh_database(server, db)
    queue = "rt"
    postmaster = await postmaster_pid(server)
    broker = broker_pid(bootstrap)
    requests, responses = (f"bench-req-{uuid.uuid4().hex[:8]}",
                           f"bench-resp-{uuid.uuid4().hex[:8]}")
    await create_topics(bootstrap, requests, responses)
    argv = [PYTHON, str(BENCH / "kafka_confluent_responder.py"), "--bootstrap", bootstrap,
            "--requests", requests, "--responses", responses]
    if match == "header":
        argv.append("--header")
    port = free_port()
    queue_cfg: dict[str, Any] = {"id": queue, "paused": True,
                                 "target": {"kind": "kafka", "topic": requests}}
    if concurrency is not None:
        queue_cfg["concurrency"] = concurrency
    if match == "template":
        queue_cfg["correlation"] = {"request": ORDER_TEMPLATE_REQUEST,
                                    "response": KIT_TEMPLATE}
    config = {**hipq_config(url, port, [queue_cfg], {"interval_seconds": 1}),
              "kafka": {"bootstrap_servers": bootstrap, "group_id": f"hipq-{name}",
                        "response_topics": [responses], "session_timeout_ms": 6000,
                        "heartbeat_interval_ms": 500, **(settings or {})}}
    config["api"]["public_url"] = f"http://127.0.0.1:{port}"
    load_before = loadavg()
    async with child(argv, "READY") as (responder, _), \
            hipq_daemon(config, workdir, name,
                        py_spy=workdir if py_spy else None) as daemon, \
            aiohttp.ClientSession() as session:
        bodies = [json.dumps({"jobs": [
            {"id": f"{name}-{i}", "data": {"orderId": f"o{i}", "version": 1, "n": i}}
            for i in range(start, min(start + 1000, jobs))]}).encode()
            for start in range(0, jobs, 1000)]
        created = await enqueue_batches(session, daemon.base_url, queue, bodies, 2)
        await wait_for_log(daemon.log_path, "Kafka response consumer joined group", within=60)
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("ANALYZE")
            trees: dict[str, tuple[int, bool]] = {
                "hipq": (daemon.pid, False), "postgres": (postmaster, True),
                "responder": (responder, True)}
            if broker is not None:
                trees["broker"] = (broker, True)
            meter, idle = CpuMeter(**trees), IdleMeter()
            costs = PgCosts(server, db)
            await asyncio.sleep(1)  # the daemon's start-up is over
            await costs.start()
            meter.start()
            idle.start()
            t0 = time.time()
            async with session.post(f"{daemon.base_url}/v1/jobs/{queue}/resume") as answer:
                answer.raise_for_status()
            archived = await wait_archived(conn, queue, jobs, within)
            cpu = meter.stop()
            machine = idle.stop()
            pg = await costs.stop(jobs)
            idle_share = machine["idle_share"]
            load_after = loadavg()
            row = await conn.fetchrow(
                "SELECT count(*) FILTER (WHERE status = 'succeeded') AS ok, "
                "extract(epoch FROM max(finished_at))::float8 AS last "
                "FROM archived_jobs WHERE queue = $1", queue)
            await conn.execute("ANALYZE archived_jobs, response_inbox")
            stages = stage_breakdown(await conn.fetch(_STAGES, queue))
            if archived < jobs:
                stages["left"] = await leftovers(conn, queue)
                log(f"  {name}: {jobs - archived} jobs not archived: {stages['left']}")
        finally:
            await conn.close()
        rss = daemon.rss.peak_mb
    await drop_database(server, db)
    elapsed = max((row["last"] or time.time()) - t0, 1e-3)
    out = {"phase": phase, "match": match, "concurrency": concurrency, "jobs": jobs,
           "kafka_settings": config["kafka"],
           "created": created, "archived": archived, "succeeded": int(row["ok"]),
           "complete": archived >= jobs, "seconds": round(elapsed, 2),
           "completed_jobs_per_s": round(archived / elapsed, 1), **stages,
           "cpu_s": cpu, "cpu_ms_per_job": {k: round(v * 1000 / max(archived, 1), 3)
                                            for k, v in cpu.items()},
           "postgres_per_job": pg, "idle_share": idle_share,
           "machine_busy_cpu_s": machine["busy_cpu_s"],
           "unaccounted_cpu_s": round(machine["busy_cpu_s"] - sum(cpu.values()), 2),
           "top_processes_cpu_s": machine["top_processes_cpu_s"], "peak_rss_mb": round(rss, 1),
           "loadavg_before": load_before, "loadavg_after": load_after,
           "goals": GOALS[phase]}
    rt = out["round_trip_ms"]
    log(f"  {name}: {out['completed_jobs_per_s']:,.0f} jobs/s ({archived:,}/{jobs:,} in "
        f"{elapsed:.1f} s); round trip p50/p99 {rt['p50']}/{rt['p99']} ms; CPU ms/job "
        + " / ".join(f"{k} {v:.3f}" for k, v in out["cpu_ms_per_job"].items())
        + f"; {pg_per_job(pg)}; idle {idle_share:.0%}; load {load_before} -> {load_after}; "
        f"CPU s of the "
        f"machine {machine['busy_cpu_s']}, {out['unaccounted_cpu_s']} outside the four; "
        f"top {machine['top_processes_cpu_s']}{top_statements(pg)}")
    return out


def print_rows(details: dict[str, Any]) -> None:
    """The phases' lines of bench/run's table of the stock-durability phases."""
    for phase in PHASES:
        run = details.get(phase)
        if not run or "failed" in run:
            continue
        rt, per_job = run["round_trip_ms"], run["cpu_ms_per_job"]
        print(f"  {phase:<15} {run['median_completed_jobs_per_s']:>8,.0f} jobs/s  round trip "
              f"p50/p99 {rt['p50']}/{rt['p99']} ms  CPU ms/job "
              + " / ".join(f"{k} {v:.3f}" for k, v in per_job.items())
              + (f"  {pg_per_job(run['postgres_per_job'])}" if run.get("postgres_per_job")
                 else "")
              + f"  idle {run['idle_share']:.0%}  load {run['loadavg_before'][0]}"
              f"->{run['loadavg_after'][0]}  ({run['archived']:,}/{run['jobs']:,}; runs "
              f"{run['all_completed_jobs_per_s']})")
        stages = run["stages_ms"]
        print(f"  {'':<15} p50 ms: claim->producer {stages['claim_to_producer']['p50']}, "
              f"->responder {stages['producer_to_responder']['p50']}, ->hipq consumer "
              f"{stages['responder_to_consumer']['p50']}, ->applied "
              f"{stages['consumer_to_applied']['p50']}")


def summary(details: dict[str, Any]) -> dict[str, Any]:
    c1000 = details.get("kafka-c1000", {})
    unlimited = details.get("kafka-unlimited", {})
    return {
        "kafka_c1000_jobs_per_s": c1000.get("median_completed_jobs_per_s"),
        "kafka_c1000_round_trip_p50_ms": c1000.get("round_trip_ms", {}).get("p50"),
        "kafka_unlimited_jobs_per_s": unlimited.get("median_completed_jobs_per_s"),
    }

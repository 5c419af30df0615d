"""bench/run: hipq's throughput, latency, memory and backlog scaling, side by side with
a peer (Procrastinate), on one throwaway PostgreSQL, in one run.

Phases (``--only`` picks some; every phase uses its own fresh database):

1. lifecycle: ``--jobs`` jobs enqueued over the HTTP API (batch route, and single
   PUTs) into a running ``hipq run``, launched through a python target that completes
   at once and through the HTTP target in sync mode against a local aiohttp
   downstream (its own process), until all are archived. Plus batch enqueue into a
   paused queue (the enqueue path alone).
2. latency: enqueue->launch and response->archived at a steady offered load, with
   early wake-ups on and off (``reconcile.early_wake``), reconcile interval 5 s.
3. memory: peak RSS of ``hipq run`` with a backlog queued and many jobs running.
4. tick: bench/tick_scaling.py at 1k / 100k / 1M queued jobs.
5. peer: Procrastinate in bench/.peer-venv, no-op jobs deferred in bulk, worked at
   each ``--peer-concurrency``.
6. on a second PostgreSQL with stock durability (bench/durable_phases.py):
   lifecycle-durable, callback, kafka, kafka-header, kafka-c1000, kafka-unlimited
   (bench/kafka_phases.py: a confluent-kafka responder), idle, graphile.
7. partner (bench/partner_proof.py, the partner's word's proof, docs/throttling.md): a fake
   partner of 10 concurrent requests at 0.1 s behind a queue configured far above it;
   SQLite with one daemon,
   PostgreSQL (stock durability) with one, and with three, the owner SIGKILLed.
8. sql-enqueue (bench/sql_enqueue.py, docs/from-your-database.md): 10,000 jobs in one hipq.sql
   transaction; intake ingestion against the batch API, on PostgreSQL with stock durability.
9. nginx (bench/nginx_defaults.py, docs/throttling.md, "What hipq does with no setting"):
   queues with no setting but ``concurrency: 60`` in front of nginx's limit_req (100 r/s,
   burst 10, a bare 429) or limit_conn 5 and a 50 ms backend: limit_req on SQLite and on
   PostgreSQL (stock durability), limit_conn on SQLite, two queues naming one partner on
   SQLite, and PostgreSQL with three daemons, the owner SIGKILLed.

Prints a table, writes ``--out`` (bench/results/results.json). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import durable_phases as dp
import hipq_scenarios as hs
import idle_memory as im
import nginx_defaults as nd
import partner_proof as pp
import sql_enqueue as se
from common import BENCH, PYTHON, drop_database, fresh_database, loadavg, log, machine, postgres

PEER_VENV = BENCH / ".peer-venv"
PEER_REQUIREMENTS = ["procrastinate==3.10.0", "psycopg[binary]>=3.2"]
FSYNC_OFF_PHASES = ("lifecycle", "latency", "memory", "tick", "peer")
PHASES = (*FSYNC_OFF_PHASES, *dp.PHASES, "partner", *se.PHASES, "nginx")


# -- phases ---------------------------------------------------------------------------


async def run_lifecycle(server: str, workdir: Path, args: argparse.Namespace,
                        notes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    common = {"jobs": args.jobs, "batch_size": args.batch_size, "within": args.wait_seconds}
    for target in ("python", "sync"):
        runs = []
        for rep in range(args.repeat):
            runs.append(await hs.lifecycle(
                server, workdir, target=target, mode="batch", in_flight=args.batch_in_flight,
                name=f"lc_{target}_batch_{rep}", py_spy=args.py_spy and target == "python"
                and rep == 0, **common))
        out[f"{target}_batch"] = median_run(runs)
        if target == "python" or not args.skip_sync_single:
            out[f"{target}_single"] = await hs.lifecycle(
                server, workdir, target=target, mode="single", in_flight=args.single_in_flight,
                name=f"lc_{target}_single", py_spy=args.py_spy and target == "python",
                **{**common, "jobs": args.single_jobs})
    if args.skip_sync_single:
        notes.append("no single-PUT lifecycle run for the HTTP sync target (--skip-sync-single)")
    runs = [await hs.enqueue_only(server, workdir, jobs=args.jobs, batch_size=args.batch_size,
                                  in_flight=args.batch_in_flight, name=f"enqueue_only_{rep}")
            for rep in range(args.repeat)]
    out["batch_enqueue_paused"] = median_run(runs, key="enqueue_jobs_per_s")
    out["python_drain_analyzed"] = await hs.drain(
        server, workdir, jobs=args.jobs, batch_size=args.batch_size,
        in_flight=args.batch_in_flight, within=args.wait_seconds, name="drain_analyzed")
    for name, run in out.items():
        if not run.get("complete", True):
            notes.append(f"lifecycle {name}: only {run['archived']:,} of {run['jobs']:,} jobs "
                         f"archived within --wait-seconds {args.wait_seconds:g}; the rate "
                         "counts the archived ones over the whole wait")
        first = run.get("first_archived_s")
        if "first_archived_s" in run and (first is None or first > 10):
            when = "never" if first is None else f"only after {first:.0f} s"
            notes.append(f"lifecycle {name}: the first job was archived {when}; see the "
                         f"daemon log in {args.logs}")
    if args.repeat > 1:
        notes.append(f"batch lifecycle and paused-queue enqueue: median of {args.repeat} runs; "
                     "single-enqueue lifecycle: one run")
    else:
        notes.append("lifecycle: one run each (--repeat N for medians of N runs)")
    return out


def median_run(runs: list[dict[str, Any]], key: str = "completed_jobs_per_s") -> dict[str, Any]:
    """The run with the median ``key`` (lower median), with every run's values listed."""
    ordered = sorted(runs, key=lambda r: r[key])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["runs"] = len(runs)
    for name in ("enqueue_jobs_per_s", "completed_jobs_per_s", "peak_rss_mb"):
        if name in chosen:
            chosen[f"all_{name}"] = [r[name] for r in runs]
            chosen[f"median_{name}"] = round(statistics.median(r[name] for r in runs), 1)
    return chosen


async def run_latency(server: str, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Early wake on and off at each rate; the first rate's runs are the headline."""
    out: dict[str, Any] = {}
    for i, rate in enumerate(args.latency_rates):
        for wake in (True, False):
            name = ("early_wake_on" if wake else "early_wake_off") + (f"_{rate:g}" if i else "")
            out[name] = await hs.latency(server, workdir, early_wake=wake, rate=rate,
                                         seconds=args.latency_seconds,
                                         warmup=args.latency_warmup, within=30,
                                         py_spy=args.py_spy and wake)
    return out


def run_tick(server: str, workdir: Path, args: argparse.Namespace,
             notes: list[str]) -> dict[str, Any]:
    sizes = [s for s in args.tick_sizes if not (args.skip_1m and s >= 1_000_000)]
    if len(sizes) < len(args.tick_sizes):
        notes.append("tick: the 1,000,000-job backlog was skipped (--skip-1m)")
    json_out = workdir / "tick.json"
    argv = [PYTHON, str(BENCH / "tick_scaling.py"), "--database-url", server,
            "--sizes", ",".join(map(str, sizes)), "--json-out", str(json_out)]
    log(f"  {' '.join(shlex.quote(a) for a in argv[1:])}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=args.tick_timeout)
    if done.returncode != 0:
        raise SystemExit(f"bench/tick_scaling.py failed:\n{done.stderr[-3000:]}")
    table = [line for line in done.stdout.splitlines() if not line.startswith("{")]
    log("\n".join(table))
    result: dict[str, Any] = json.loads(json_out.read_text())
    result["sizes_run"] = sizes
    return result


def ensure_peer_venv() -> float:
    """bench/.peer-venv with Procrastinate (created once, re-checked each run)."""
    started = time.monotonic()
    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        log(f"  creating {PEER_VENV.relative_to(BENCH.parent)}")
        subprocess.run([PYTHON, "-m", "venv", str(PEER_VENV)], check=True, timeout=300)
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                           "--disable-pip-version-check", *PEER_REQUIREMENTS],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"installing the peer failed:\n{done.stdout}{done.stderr}"[-3000:])
    return time.monotonic() - started


async def run_peer(server: str, args: argparse.Namespace, notes: list[str]) -> dict[str, Any]:
    install_s = ensure_peer_venv()
    url = await fresh_database(server, "bench_peer")
    argv = [str(PEER_VENV / "bin" / "python"), str(BENCH / "peer_procrastinate.py"),
            "--database-url", url, "--jobs", str(args.peer_jobs),
            "--concurrency", ",".join(map(str, args.peer_concurrency)),
            "--max-seconds", str(args.peer_max_seconds)]
    load_before = loadavg()
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await proc.communicate()
    await drop_database(server, "bench_peer")
    if proc.returncode != 0:
        raise SystemExit(f"bench/peer_procrastinate.py failed:\n{stderr.decode()[-3000:]}")
    result: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
    for run in result["runs"]:
        log(f"  procrastinate concurrency {run['concurrency']}: {run['jobs_per_s']:,.0f} jobs/s "
            f"({run['succeeded']:,}/{run['jobs']:,} in {run['work_s']:.1f} s)")
        if not run["all_done"]:
            notes.append(f"peer at concurrency {run['concurrency']}: stopped after "
                         f"{args.peer_max_seconds:g} s (--peer-max-seconds) with "
                         f"{run['succeeded']:,} of {run['jobs']:,} jobs done; the rate is "
                         "over that window")
    result.update(install_s=round(install_s, 1), loadavg_before=load_before,
                  loadavg_after=loadavg())
    return result


# -- the run --------------------------------------------------------------------------


async def run_all(args: argparse.Namespace, notes: list[str]) -> dict[str, Any]:
    details: dict[str, Any] = {}
    workdir = args.logs
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    details.update(await se.run_phase(args, workdir, notes))
    if not any(p in args.only for p in FSYNC_OFF_PHASES):
        details.update(await dp.run_durable(args, workdir, notes))
        await run_partner(args, workdir, notes, details)
        details.update(await nd.run_phase(args, workdir, notes))
        details["postgres"] = (details.get("postgres_durable", {}).get("server_version")
                               or details.get("nginx_postgres", "-"))
        return details
    with postgres(args.database_url) as server:
        details["postgres"] = await server_version(server)
        for phase in FSYNC_OFF_PHASES:
            if phase not in args.only:
                continue
            log(f"{phase} ...")
            started = time.monotonic()
            if phase == "lifecycle":
                details[phase] = await run_lifecycle(server, workdir, args, notes)
            elif phase == "latency":
                details[phase] = await run_latency(server, workdir, args)
            elif phase == "memory":
                details[phase] = await hs.memory(server, workdir, queued=args.memory_queued,
                                                 running=args.memory_running, within=180)
            elif phase == "tick":
                details[phase] = await asyncio.to_thread(run_tick, server, workdir, args, notes)
            else:
                details[phase] = await run_peer(server, args, notes)
            details[phase]["phase_s"] = round(time.monotonic() - started, 1)
    details.update(await dp.run_durable(args, workdir, notes))
    await run_partner(args, workdir, notes, details)
    details.update(await nd.run_phase(args, workdir, notes))
    return details


async def run_partner(args: argparse.Namespace, workdir: Path, notes: list[str],
                      details: dict[str, Any]) -> None:
    if "partner" not in args.only:
        return
    log("partner (stock durability) ...")
    started = time.monotonic()
    details.update(await pp.run_phase(args, workdir, notes))
    details["partner_phase_s"] = round(time.monotonic() - started, 1)


async def server_version(server: str) -> str:
    import asyncpg

    conn = await asyncpg.connect(server)
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


def summary(details: dict[str, Any]) -> dict[str, Any]:
    """The headline keys of results.json (None when a phase did not run)."""
    lc, lat = details.get("lifecycle", {}), details.get("latency", {})
    mem, tick, peer = details.get("memory", {}), details.get("tick", {}), details.get("peer", {})
    best_peer = max((r["jobs_per_s"] for r in peer.get("runs", [])), default=None)
    lifecycle = lc.get("python_batch", {}).get("median_completed_jobs_per_s")
    wake = lat.get("early_wake_on", {})
    out: dict[str, Any] = {
        "lifecycle_jobs_per_s": lifecycle,
        "lifecycle_drain_analyzed_jobs_per_s":
            lc.get("python_drain_analyzed", {}).get("completed_jobs_per_s"),
        "lifecycle_http_sync_jobs_per_s":
            lc.get("sync_batch", {}).get("median_completed_jobs_per_s"),
        "batch_enqueue_jobs_per_s": lc.get("python_batch", {}).get("median_enqueue_jobs_per_s"),
        "batch_enqueue_paused_jobs_per_s":
            lc.get("batch_enqueue_paused", {}).get("median_enqueue_jobs_per_s"),
        "single_enqueue_jobs_per_s": lc.get("python_single", {}).get("enqueue_jobs_per_s"),
        "procrastinate_jobs_per_s": best_peer,
        "launch_latency_p99_ms": wake.get("enqueue_to_launch_ms", {}).get("p99"),
        "launch_latency_p99_ms_no_early_wake":
            lat.get("early_wake_off", {}).get("enqueue_to_launch_ms", {}).get("p99"),
        "response_to_archived_p99_ms": wake.get("response_to_archived_ms", {}).get("p99"),
        "peak_rss_mb": mem.get("peak_rss_mb"),
        "tick_ms_1k": tick.get("tick_ms_1k"), "tick_ms_100k": tick.get("tick_ms_100k"),
        "tick_ms_1m": tick.get("tick_ms_1m"),
    }
    out["hipq_over_procrastinate"] = (round(lifecycle / best_peer, 1)
                                      if lifecycle is not None and best_peer else None)
    out.update(dp.summary(details))
    out.update(pp.summary(details))
    out.update(se.summary(details))
    out.update(nd.summary(details))
    return out


TARGETS: list[tuple[str, str, str, float | None]] = [
    # key, label, comparison, goal (issue 6)
    ("lifecycle_jobs_per_s", "lifecycle, python target, batch enqueue (jobs/s)", ">=", 10000),
    ("lifecycle_drain_analyzed_jobs_per_s", "  same jobs pre-loaded, ANALYZEd, drained (jobs/s)",
     "", None),
    ("lifecycle_http_sync_jobs_per_s", "lifecycle, HTTP sync target, batch enqueue (jobs/s)",
     "", None),
    ("batch_enqueue_jobs_per_s", "batch enqueue during that run (jobs/s)", ">=", 30000),
    ("batch_enqueue_paused_jobs_per_s", "batch enqueue, paused queue (jobs/s)", "", None),
    ("single_enqueue_jobs_per_s", "single PUT enqueue (jobs/s)", "", None),
    ("procrastinate_jobs_per_s", "Procrastinate, best concurrency (jobs/s)", "", None),
    ("hipq_over_procrastinate", "hipq lifecycle / Procrastinate", ">=", 20),
    ("launch_latency_p99_ms", "enqueue->launch p99, early wake (ms)", "<", 100),
    ("launch_latency_p99_ms_no_early_wake", "enqueue->launch p99, no early wake (ms)", "", None),
    ("response_to_archived_p99_ms", "response->archived p99, early wake (ms)", "", None),
    ("peak_rss_mb", "peak RSS, 10k running + 100k queued (MB)", "<", 150),
    ("tick_ms_1k", "tick at 1k queued (ms, median)", "", None),
    ("tick_ms_100k", "tick at 100k queued (ms, median)", "", None),
    ("tick_ms_1m", "tick at 1M queued (ms, median)", "<=2x 1k", None),
    # stock durability (issue 12)
    ("durable_lifecycle_jobs_per_s", "lifecycle, python target, fsync on (jobs/s)", "", None),
    ("graphile_jobs_per_s", "graphile-worker lifecycle, best concurrency, median (jobs/s)",
     "", None),
    ("durable_lifecycle_over_graphile", "hipq lifecycle / graphile-worker, fsync on", ">=", 1.25),
    ("durable_lifecycle_over_graphile_pair_median", "  the same run by run, median", "", None),
    ("durable_lifecycle_in_tick_jobs_per_s", "  the same, Python target in_tick: true (jobs/s)",
     "", None),
    ("durable_lifecycle_in_tick_over_graphile", "  in_tick lifecycle / graphile-worker", ">=",
     1.25),
    ("durable_lifecycle_in_tick_over_graphile_pair_median", "  the same run by run, median",
     "", None),
    ("callback_jobs_per_s", "round trip, HTTP callback (jobs/s)", ">=", 4000),
    ("kafka_template_jobs_per_s", "round trip, Kafka, template match (jobs/s)", ">=", 5000),
    ("kafka_header_jobs_per_s", "round trip, Kafka, header (jobs/s)", ">=", 5000),
    # issue 28: a confluent-kafka responder, queue concurrency 1,000 and unlimited
    ("kafka_c1000_jobs_per_s", "round trip, Kafka, concurrency 1,000 (jobs/s)", ">=", 6000),
    ("kafka_c1000_round_trip_p50_ms", "  its round trip under load, p50 (ms)", "<=", 150),
    ("kafka_unlimited_jobs_per_s", "round trip, Kafka, unlimited concurrency (jobs/s)", ">=",
     10000),
    ("idle_max_running_cpu_s_per_s", "idle at the most running: hipq+PG CPU s/s", "<", 0.02),
    *im.TARGETS,  # issue 28: the daemon's RSS, 100k running / 10 queues with 1k running
    # the partner's word (docs/throttling.md), chosen settings, PostgreSQL x3 with the owner killed
    ("partner_throttled_pct_x3_kill", "partner proof x3 kill: throttled/launches (%)", "<",
     100 * pp.MAX_THROTTLED_SHARE),
    ("partner_accepted_pct_x3_kill", "partner proof x3 kill: accepted/capacity (%)", ">=",
     100 * pp.MIN_ACCEPTED_SHARE),
    ("partner_failed_jobs_x3_kill", "partner proof x3 kill: failed jobs", "<", 1),
    ("partner_attempts_on_429s_x3_kill", "partner proof x3 kill: attempts spent on 429s", "<",
     1),
    *se.TARGETS,
    *nd.TARGETS,
]


def verdict(key: str, value: Any, op: str, goal: float | None, head: dict[str, Any]) -> str:
    if value is None:
        return "not run"
    if key == "tick_ms_1m" and head.get("tick_ms_1k"):
        return "met" if value <= 2 * head["tick_ms_1k"] else "NOT met"
    if goal is None:
        return ""
    met = (value >= goal if op == ">=" else value <= goal if op == "<=" else value < goal)
    return "met" if met else "NOT met"


def _shown(value: Any) -> str:
    """A table value: ratios and small figures with three significant digits (a
    ratio of 1.24 against a goal of 1.25 must not read 1.2, nor an idle CPU of
    0.014 read 0.0), larger ones with one decimal."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    return f"{value:,}"


def print_table(results: dict[str, Any]) -> None:
    head = results
    print(f"\nhipq benchmarks, {results['date']}, {results['machine']['cores']} cores, "
          f"{results['machine']['ram_gb']} GB RAM, PostgreSQL {results['postgres']}, "
          f"load average {results['loadavg_start']} -> {results['loadavg_end']}")
    print(f"{'measure':<56} {'value':>10}  {'goal':>9}  verdict")
    for key, label, op, goal in TARGETS:
        value = head.get(key)
        shown = _shown(value)
        goal_text = op if goal is None else f"{op} {goal:,g}"
        print(f"{label:<56} {shown:>10}  {goal_text:>9}  {verdict(key, value, op, goal, head)}")
    details = results["details"]
    if "lifecycle" in details:
        print("\nlifecycle detail (enqueue jobs/s -> completed jobs/s, median run):")
        for name, run in details["lifecycle"].items():
            if isinstance(run, dict) and "first_archived_s" in run:
                print(f"  {name:<14} enqueue {run['enqueue_jobs_per_s']:>7,.0f}  completed "
                      f"{run['completed_jobs_per_s']:>6,.0f}  ({run['archived']:,}/"
                      f"{run['jobs']:,}; first archived "
                      + ("never" if run["first_archived_s"] is None else
                         f"at {run['first_archived_s']:.1f} s, then "
                         f"{run['archiving_jobs_per_s'] or 0:,.0f}/s")
                      + f"; daemon CPU {run['daemon_cpu_s']:.1f} s; peak RSS "
                      f"{run['peak_rss_mb']:.0f} MB)")
    if "latency" in details:
        print("\nlatency (ms) p50 / p95 / p99 (single PUTs at an offered load, open loop):")
        for name, run in details["latency"].items():
            if isinstance(run, dict) and "enqueue_to_launch_ms" in run:
                e, r = run["enqueue_to_launch_ms"], run["response_to_archived_ms"]
                print(f"  {name:<15} {run['offered_jobs_per_s']:g}/s  enqueue->launch "
                      f"{e['p50']} / {e['p95']} / {e['p99']}   "
                      f"response->archived {r['p50']} / {r['p95']} / {r['p99']}   PUTs answered "
                      f"at {run['enqueue_answered_jobs_per_s']:,.0f}/s"
                      + ("" if run["kept_up"] else " (saturated: below the offered load)"))
    if "peer" in details and details.get("lifecycle"):
        print("\nhipq / Procrastinate (hipq completed jobs/s over the peer's jobs/s):")
        for run in details["peer"]["runs"]:
            ratios = ", ".join(
                f"{name} {lc['completed_jobs_per_s'] / run['jobs_per_s']:.1f}x"
                for name, lc in details["lifecycle"].items()
                if isinstance(lc, dict) and "completed_jobs_per_s" in lc)
            print(f"  vs concurrency {run['concurrency']} ({run['jobs_per_s']:,.0f} jobs/s): "
                  f"{ratios}")
    dp.print_tables(details)
    pp.print_table(details)
    se.print_table(details)
    nd.print_table(details)
    for note in results["notes"]:
        print(f"note: {note}")


# -- command line ----------------------------------------------------------------------


def ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--database-url", default=os.environ.get("HIPQ_BENCH_DATABASE_URL"),
                   help="a PostgreSQL server URL whose role may CREATE DATABASE "
                        "(default: a throwaway server from scripts/pg-ephemeral)")
    p.add_argument("--only", default=",".join(PHASES),
                   help=f"comma-separated phases to run (default: all of {','.join(PHASES)})")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 2,000 jobs, 5 s latency, 20k+2k memory, tick 1k/100k, "
                        "peer 1,000 jobs, no repeats")
    p.add_argument("--jobs", type=int, default=20000, help="jobs per lifecycle run")
    p.add_argument("--batch-size", type=int, default=1000, help="jobs per batch request")
    p.add_argument("--batch-in-flight", type=int, default=2, help="batch requests in flight")
    p.add_argument("--single-in-flight", type=int, default=16, help="PUT requests in flight")
    p.add_argument("--single-jobs", type=int, default=20000,
                   help="jobs of each single-PUT lifecycle run")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of each batch lifecycle and paused enqueue (median reported)")
    p.add_argument("--skip-sync-single", action="store_true",
                   help="no single-PUT lifecycle run for the HTTP sync target")
    p.add_argument("--wait-seconds", type=float, default=75,
                   help="how long a lifecycle run may take to archive everything")
    p.add_argument("--latency-rates", type=ints, default=[200],
                   help="offered jobs/s, comma-separated (default 200; e.g. 200,50 adds a "
                        "load today's hipq can sustain)")
    p.add_argument("--latency-seconds", type=float, default=15, help="measured seconds")
    p.add_argument("--latency-warmup", type=float, default=2,
                   help="seconds sent first at the same rate, not measured")
    p.add_argument("--memory-queued", type=int, default=100000)
    p.add_argument("--memory-running", type=int, default=10000)
    p.add_argument("--tick-sizes", type=ints, default=[1000, 100000, 1000000])
    p.add_argument("--skip-1m", action="store_true", help="no 1,000,000-job tick backlog")
    p.add_argument("--tick-timeout", type=float, default=420)
    p.add_argument("--peer-jobs", type=int, default=20000)
    p.add_argument("--peer-concurrency", type=ints, default=[10, 50])
    p.add_argument("--peer-max-seconds", type=float, default=90,
                   help="cap on each peer worker run (the rate is then over that window)")
    p.add_argument("--py-spy", action="store_true",
                   help="record the first python-target batch lifecycle daemon with py-spy "
                        "(needs py-spy; raw stacks go to --logs)")
    p.add_argument("--logs", type=Path, default=BENCH / ".logs",
                   help="daemon logs and configs (emptied first; default bench/.logs)")
    p.add_argument("--out", type=Path, default=BENCH / "results" / "results.json")
    dp.add_arguments(p, ints)
    pp.add_arguments(p)
    se.add_arguments(p)
    nd.add_arguments(p)
    args = p.parse_args(argv)
    args.only = [x for x in args.only.split(",") if x]
    unknown = set(args.only) - set(PHASES)
    if unknown:
        p.error(f"--only: unknown phases {sorted(unknown)}")
    if args.quick:
        args.jobs, args.single_jobs, args.repeat, args.latency_seconds = 2000, 1000, 1, 5
        args.memory_queued, args.memory_running, args.peer_jobs = 20000, 2000, 1000
        args.tick_sizes = [1000, 100000]
        dp.quick(args)
        args.partner_jobs = 2000
        args.nginx_jobs = 2000
    return args


def reductions(args: argparse.Namespace) -> list[str]:
    """What this run measured below the issue's sizes."""
    sizes = {"jobs": (args.jobs, 20000), "single_jobs": (args.single_jobs, 20000),
             "latency_seconds": (args.latency_seconds, 15),
             "latency_rate": (args.latency_rates[0], 200),
             "memory_queued": (args.memory_queued, 100000),
             "memory_running": (args.memory_running, 10000),
             "peer_jobs": (args.peer_jobs, 20000),
             "partner_jobs": (args.partner_jobs, 3000),
             "nginx_jobs": (args.nginx_jobs, 3000)}
    notes = [f"{name} = {value:,g} (issue: {issue:,g})"
             for name, (value, issue) in sizes.items() if value != issue]
    notes += dp.reductions(args)
    if max(args.tick_sizes) < 1_000_000:
        notes.append("tick: no 1,000,000-job backlog in --tick-sizes")
    if set(args.only) != set(PHASES):
        notes.append(f"only these phases ran: {','.join(args.only)}")
    return notes


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    notes = reductions(args)
    started, load_start = time.monotonic(), loadavg()
    date = datetime.now(UTC).isoformat(timespec="seconds")
    details = asyncio.run(run_all(args, notes))
    results: dict[str, Any] = {
        **summary(details), "date": date, "machine": machine(),
        "postgres": details.pop("postgres"), "loadavg_start": load_start,
        "loadavg_end": loadavg(), "elapsed_s": round(time.monotonic() - started, 1),
        "command": "bench/run " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
        "notes": notes, "details": details,
    }
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    print(f"\n{results['elapsed_s']:.0f} s; results in {args.out}")


if __name__ == "__main__":
    main()

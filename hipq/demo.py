"""``hipq demo``: a self-contained showcase, end to end, in about 20 seconds.

A daemon on a SQLite file in a temporary directory, its API and dashboard on
127.0.0.1, and a built-in fake downstream (an aiohttp server) that accepts each
launch, works for a random while, and answers at the signed callback URL, failing
now and then; and the fake partner of :mod:`hipq.downstream.partner` in its own
process, a strict one (at most 5 requests at once, answered in 100 ms; beyond
that HTTP 429, without ``Retry-After``). Five queues show the throttling:

- ``emails``: capacity 10 shared by weight (a newsletter takes 3), priorities
  (password resets jump the queue);
- ``partner-sync``: capacity 6 split by quota per partner (acme 1/2, globex 1/3);
- ``invoices``: a rate limit of 8 launches a second;
- ``night-reports``: a time window that is closed now: its jobs wait for it;
- ``partner-api``: configured for 30 at once, six times what its partner takes;
  the partner's word (docs/throttling.md) brings it down to 5. Each 429 is a throttled try
  given back (no attempt spent) that pauses the queue (0.2 s, doubling per round
  of refusals, at most 1 s), and the adaptive limit (AIMD) loses 16% per round
  (30 > 25 > 21 > ... > 6 > 5, in about 8 s), then probes one higher every 10
  successes and comes back to 5 at the next refusal.

A progress bar runs while the jobs flow (with partner-api's limit in force); a
summary ends it (partner-api: the limit it settled at, the throttled tries, what
the partner accepted and refused); exit 0. With ``--keep-running`` the daemon and
the partner stay up (Ctrl-C ends) to explore the dashboard. The partner process is
stopped however the demo ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import shutil
import signal
import statistics
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
from hipq.config import Settings, load_config
from hipq.daemon import Daemon
from hipq.downstream.partner import PartnerError, PartnerProcess
from hipq.engine.partner_word import effective_limit
from hipq.log import setup_logging
from hipq.service import Hipq
from hipq.store.records import QueueState

DEADLINE_SECONDS = 50.0  # the showcase gives up (exit 1) rather than run past a minute
FAILURE_RATE = 0.08
LATENCY = (0.05, 0.6)
WINDOW_QUEUE = "night-reports"
BAR = 30
# partner-api and its partner (docs/throttling.md): the queue's YAML guesses 30 at once, the
# partner's real limit is 5 (beyond it: 429 without Retry-After)
PARTNER_QUEUE = "partner-api"
PARTNER_LIMIT = 5
PARTNER_CONFIGURED = 30
PARTNER_LATENCY = 0.1
PARTNER_ARGS = ("--concurrency", str(PARTNER_LIMIT), "--latency", str(PARTNER_LATENCY))
PARTNER_MIN = 1
# 16% less per round: 30 comes down to 5 in ten rounds, and a refused probe at 6
# lands back on 5 (6 x 0.84 = 5.04; a quarter less would land on 4)
PARTNER_ADAPTIVE = {"min": PARTNER_MIN, "increase_every": 10, "decrease": 0.84}
# doubling, capped: the demo shows the adaptive concurrency (AIMD) coming down, so the
# learned rate (the default for a refusal with no time) is off here
PARTNER_BACKOFF = {"initial_seconds": 0.2, "max_seconds": 1.0, "learn": False}
PARTNER_SHARE = 0.7  # of the jobs that flow (273 of the default 400); the rest as before


def demo_settings(directory: Path, port: int, now_hour: int, *, downstream_url: str,
                  partner_url: str) -> Settings:
    """The demo's config: SQLite in ``directory``, fast ticks, the five queues."""
    target = {"kind": "http", "url": downstream_url + "/partner/{queue}/{id}",
              "mode": "callback", "timeout_seconds": 10}
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
            {"id": PARTNER_QUEUE, "concurrency": PARTNER_CONFIGURED, "attempts": 3,
             "retry": retry, "adaptive": PARTNER_ADAPTIVE, "backoff": PARTNER_BACKOFF,
             "target": {"kind": "http", "url": partner_url + "/v1/{queue}/{id}",
                        "mode": "sync", "timeout_seconds": 10}},
        ]})


def demo_jobs(total: int, rng: random.Random) -> dict[str, list[tuple[str, EnqueueRequest]]]:
    """The jobs to enqueue per queue: PARTNER_SHARE of those that flow to
    partner-api; of the rest about half emails, a quarter partner syncs."""
    flowing = max(total - 10, 4)
    partner = round(flowing * PARTNER_SHARE)
    jobs: dict[str, list[tuple[str, EnqueueRequest]]] = {}
    for i in range(flowing - partner):
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
    jobs[PARTNER_QUEUE] = [(f"call-{i:05d}", EnqueueRequest.model_validate(
        {"data": {"call": i}})) for i in range(partner)]
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
class PartnerWatch:
    """partner-api as the demo sees it, sampled with the progress while its jobs
    flow: its limit in force (as its owner learned it and stored it) and its
    throttled tries."""

    total: int = 0
    samples: list[tuple[float, int]] = field(default_factory=list)  # (seconds in, limit)
    throttled: int = 0
    live: int = 0

    def observe(self, state: QueueState | None, live: int, seconds: float) -> None:
        if state is not None:
            self.throttled = state.throttled_total
        self.live = live
        if live:
            learned = None if state is None else state.effective
            limit = effective_limit(PARTNER_CONFIGURED, PARTNER_MIN, learned)
            self.samples.append((seconds, limit or PARTNER_CONFIGURED))

    def story(self, *, stopped: bool) -> str:
        """How the limit came down to the partner's real limit and where it stayed
        (``stopped``: the demo was stopped before its jobs ran out)."""
        down = next((i for i, (_, limit) in enumerate(self.samples)
                     if limit <= PARTNER_LIMIT), None)
        steps: list[int] = []
        for _, limit in self.samples if down is None else self.samples[:down + 1]:
            if not steps or limit < steps[-1]:
                steps.append(limit)
        if down is None:
            trail = (f"came down {' > '.join(map(str, steps))}" if len(steps) > 1
                     else f"stayed at {PARTNER_CONFIGURED}")
            why = "the demo was stopped" if stopped else "its jobs ran out (run more: --jobs)"
            return f"adaptive limit {trail}; {why} before it reached {PARTNER_LIMIT}"
        trail = " > ".join(map(str, steps))
        since = [limit for _, limit in self.samples[down:]]
        low, high = min(since), max(since)
        then = f"held at {low}" if low == high else f"then {low} to {high}"
        adaptive = PARTNER_ADAPTIVE
        return (f"adaptive limit settled at {statistics.mode(since)} ({trail} in "
                f"{self.samples[down][0]:.1f} s, {then}: one more every "
                f"{adaptive['increase_every']} successes, {1 - adaptive['decrease']:.0%} "
                f"less on a 429)")

    def note(self) -> str:
        """partner-api in the progress line, the most telling first (a narrow
        terminal cuts the end): its limit in force, throttled tries, jobs done."""
        limit = f"limit {self.samples[-1][1]}, " if self.samples and self.live else ""
        return (f"; {PARTNER_QUEUE}: {limit}{self.throttled} throttled, "
                f"{self.total - self.live}/{self.total} done")


@dataclass
class Progress:
    total: int
    peaks: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    last_line: str = ""
    last_at: float = float("-inf")

    def show(self, done: int, running: int, note: str, tty: bool, now: float) -> None:
        filled = BAR * done // max(self.total, 1)
        line = (f"[{'#' * filled}{'.' * (BAR - filled)}] {done}/{self.total} jobs done, "
                f"{running} running{note}")
        if tty:  # one line rewritten in place: never wider than the terminal
            width = shutil.get_terminal_size().columns
            sys.stdout.write("\r" + line[:max(width - 1, BAR + 2)] + "\033[K")
        elif line != self.last_line and (now - self.last_at >= 1.0 or done == self.total):
            sys.stdout.write(f"progress: {line}\n")  # a log, not a terminal: once a second
            self.last_line, self.last_at = line, now
        sys.stdout.flush()


def with_user_config(settings: Settings, user: Settings | None, port: int | None) -> Settings:
    """The demo's settings with what it takes from a config named by ``-c`` (or
    ``$HIPQ_CONFIG``): ``api`` (host, port, tokens, ...) and ``logging``; its database
    and its queues stay the demo's own. ``--port`` wins over the config's port."""
    api = settings.api if user is None else user.api
    if port is not None:
        api = api.model_copy(update={"port": port})
    update: dict[str, Any] = {"api": api}
    if user is not None:
        update["logging"] = user.logging
    return settings.model_copy(update=update)


class Demo:
    def __init__(self, args: argparse.Namespace, user: Settings | None = None) -> None:
        self.args = args
        self.user = user
        self.clock = SystemClock()
        self.rng = random.Random(args.seed)
        self.stop = asyncio.Event()
        self.watch = PartnerWatch()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):  # from the start: nothing is left behind
            loop.add_signal_handler(sig, self.stop.set)
        with tempfile.TemporaryDirectory(prefix="hipq-demo-") as directory:
            downstream = FakeDownstream(self.rng, self.clock)
            try:
                await downstream.start()
                return await self._with_partner(Path(directory), downstream)
            finally:
                await downstream.close()

    async def _with_partner(self, directory: Path, downstream: FakeDownstream) -> int:
        """Start the fake partner (before the daemon), run, and stop it however it ends."""
        try:
            partner = await PartnerProcess.start(*PARTNER_ARGS)
        except PartnerError as exc:
            if self.stop.is_set():  # Ctrl-C reached the partner (our process group) first
                return 0
            sys.stderr.write(f"hipq demo: {exc}\n")
            return 1
        try:
            if self.stop.is_set():
                return 0
            return await self._with_downstream(directory, downstream, partner)
        finally:
            await partner.stop()

    async def _with_downstream(self, directory: Path, downstream: FakeDownstream,
                               partner: PartnerProcess) -> int:
        settings = with_user_config(
            demo_settings(directory, 0, self.clock.now().hour, downstream_url=downstream.url,
                          partner_url=partner.url), self.user, self.args.port)
        daemon = Daemon(settings, clock=self.clock)
        # halt, not self.stop: on Ctrl-C the summary still reads a running daemon
        ready, halt = asyncio.Event(), asyncio.Event()
        running = asyncio.ensure_future(daemon.run(stop=halt, ready=ready))
        try:
            up = asyncio.ensure_future(ready.wait())
            await asyncio.wait({running, up}, return_when=asyncio.FIRST_COMPLETED)
            up.cancel()
            if running.done():  # it did not start: its error ends the demo
                running.result()
            assert daemon.api is not None
            return await self._showcase(daemon, partner, daemon.api.url)
        finally:
            halt.set()
            await running

    async def _showcase(self, daemon: Daemon, partner: PartnerProcess, url: str) -> int:
        out = sys.stdout
        service = daemon.service
        jobs = demo_jobs(self.args.jobs, self.rng)
        flowing = sum(len(v) for q, v in jobs.items() if q != WINDOW_QUEUE)
        out.write(f"hipq demo: {flowing + len(jobs[WINDOW_QUEUE])} jobs on {len(jobs)} queues, "
                  f"SQLite in a temporary directory, a fake downstream answering by callback\n"
                  f"{PARTNER_QUEUE}: configured for {PARTNER_CONFIGURED} at once, its partner "
                  f"(a separate process) takes {PARTNER_LIMIT} (HTTP 429 beyond, no "
                  f"Retry-After): watch the limit come down\n"
                  f"dashboard: {url}/   (metrics: {url}/metrics)\n")
        for queue, items in jobs.items():
            await service.enqueue_many(queue, items)
        progress = Progress(total=flowing)
        self.watch.total = len(jobs[PARTNER_QUEUE])
        started = self.clock.monotonic()
        if not await self._flow(daemon, service, progress, started):
            out.write("\nhipq demo: the jobs did not finish in time\n")
            return 1
        if out.isatty():
            out.write("\n")
        if not self.stop.is_set():
            await self._metrics_caught_up(daemon, list(jobs), flowing)
        out.write(await self._summary(daemon, partner, progress,
                                      self.clock.monotonic() - started))
        if self.args.keep_running and not self.stop.is_set():
            out.write(f"still running: explore {url}/ (Ctrl-C ends)\n")
            out.flush()
            await self.stop.wait()
        return 0

    async def _flow(self, daemon: Daemon, service: Hipq, progress: Progress,
                    started: float) -> bool:
        """Show progress until the jobs that flow are done (or Ctrl-C): False when
        they take more than DEADLINE_SECONDS."""
        tty = sys.stdout.isatty()
        while not self.stop.is_set():
            stats = {s.queue: s for s in await service.stats()}
            live = {q: s.queued + s.running for q, s in stats.items() if q != WINDOW_QUEUE}
            states = await daemon.store.queue_state_list(queues=[PARTNER_QUEUE])
            self.watch.observe(states.get(PARTNER_QUEUE), live.get(PARTNER_QUEUE, 0),
                               self.clock.monotonic() - started)
            for q, s in stats.items():
                progress.peaks[q] = (max(self._peak(progress, q), s.running_weight),
                                     s.concurrency)
            progress.show(progress.total - sum(live.values()),
                          sum(s.running for s in stats.values()), self.watch.note(), tty,
                          self.clock.monotonic())
            if not any(live.values()):
                break
            if self.clock.monotonic() - started > DEADLINE_SECONDS:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 0.25)
        return True

    async def _metrics_caught_up(self, daemon: Daemon, queues: list[str], ended: int) -> None:
        """Wait (a second at most) until the outcome counters count ``ended`` jobs:
        the daemon feeds them after each tick persisted, so they may lag the store."""
        from hipq.metrics_export import registry_of  # prometheus_client, loaded here

        registry = registry_of(daemon.metrics)
        deadline = self.clock.monotonic() + 1.0
        while self.clock.monotonic() < deadline and sum(
                registry.get_sample_value("hipq_job_outcomes_total",
                                          {"queue": q, "outcome": outcome}) or 0
                for q in queues for outcome in ("succeeded", "failed")) < ended:
            await self.clock.sleep(0.02)

    @staticmethod
    def _peak(progress: Progress, queue: str) -> int:
        return progress.peaks.get(queue, (0, None))[0]

    async def _summary(self, daemon: Daemon, partner: PartnerProcess, progress: Progress,
                       seconds: float) -> str:
        from hipq.metrics_export import registry_of  # prometheus_client, loaded here

        registry = registry_of(daemon.metrics)
        spent = await self._attempts_spent(daemon)
        lines = [f"\nsummary after {seconds:.1f} s:",
                 f"{'queue':<16} {'succeeded':>9} {'retried':>8} {'failed':>7} "
                 f"{'peak running/capacity':>22}"]
        for queue, (peak, capacity) in sorted(progress.peaks.items()):
            def count(outcome: str, q: str = queue) -> int:
                value = registry.get_sample_value("hipq_job_outcomes_total",
                                                  {"queue": q, "outcome": outcome})
                return int(value or 0)

            # partner-api: the attempts its jobs spent beyond their first, from the jobs
            # themselves (a throttled try is given back: it spends none)
            retried = spent if queue == PARTNER_QUEUE else count("retried") + count("timeout")
            room = f"{peak}/{capacity or 'no limit'}"
            lines.append(f"{queue:<16} {count('succeeded'):>9} {retried:>8} "
                         f"{count('failed'):>7} {room:>22}")
        lines += [f"{WINDOW_QUEUE}: 10 jobs wait for their time window (opens at "
                  f"{(self.clock.now() + timedelta(hours=2)).hour:02d}:00 UTC)",
                  "emails: newsletters weigh 3, password resets (priority 0) go first; "
                  "partner-sync: acme and globex keep their quota; invoices: 8 launches/s",
                  *await self._partner_lines(daemon, partner, spent),
                  "hipq demo: done\n"]
        return "\n".join(lines)

    async def _partner_lines(self, daemon: Daemon, partner: PartnerProcess,
                             spent: int) -> list[str]:
        """partner-api's story: the limit it settled at and how, the throttled tries
        given back, the attempts spent (read from its jobs), the partner's counts."""
        state = (await daemon.store.queue_state_list(queues=[PARTNER_QUEUE])).get(PARTNER_QUEUE)
        self.watch.throttled = self.watch.throttled if state is None else state.throttled_total
        try:
            seen = await partner.stats()
            said = (f"the partner accepted {seen['accepted']} and refused {seen['refused']} "
                    f"(429), never more than {seen['max_in_flight']} at once")
        except (aiohttp.ClientError, OSError):
            said = "the partner is gone"
        return [f"{PARTNER_QUEUE}: configured {PARTNER_CONFIGURED}, its partner takes "
                f"{PARTNER_LIMIT} at once: {self.watch.story(stopped=self.stop.is_set())};",
                f"  {self.watch.throttled} throttled tries given back, "
                f"{'no attempt' if spent == 0 else f'{spent} attempts'} spent; {said}"]

    @staticmethod
    async def _attempts_spent(daemon: Daemon) -> int:
        """The tries beyond the first of partner-api's finished jobs."""
        done = await daemon.service.list_archived(queue=PARTNER_QUEUE, limit=10_000)
        return sum(max(job.attempt - 1, 0) for job in done)


def cmd_demo(args: argparse.Namespace) -> int:
    """``hipq demo``; with ``-c FILE`` (or ``$HIPQ_CONFIG``) its ``api`` and ``logging``
    (:func:`with_user_config`); ``./hipq.yaml`` is not read unless named."""
    if args.jobs < 20 or args.jobs > 5000:
        sys.stderr.write("hipq: error: --jobs must be between 20 and 5000\n")
        return 2
    user = None
    if args.config is not None:
        from hipq.cli.commands import check_exposure

        user = load_config(args.config)
        check_exposure(user.api)
        setup_logging(user.logging.level, user.logging.json_format)
    else:
        setup_logging("WARNING")
        # failed tries are part of the show: the summary counts them, one line each is noise
        logging.getLogger("hipq.jobs").setLevel(logging.CRITICAL)
    return asyncio.run(Demo(args, user).run())

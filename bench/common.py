"""Shared parts of the benchmark harness: the throwaway PostgreSQL, a ``hipq run``
subprocess with an RSS sampler, the downstream subprocess, percentiles, the machine."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import psutil
import yaml
from pg_costs import PRELOAD

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PG_EPHEMERAL = ROOT / "scripts" / "pg-ephemeral"
PYTHON = sys.executable
HIPQ = str(Path(PYTHON).with_name("hipq"))
RSS_SAMPLE_SECONDS = 0.05


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- PostgreSQL -----------------------------------------------------------------------


@contextmanager
def postgres(url: str | None, *, durable: bool = False) -> Iterator[str]:
    """A server URL: the given one, else a throwaway server stopped at the end (with
    ``durable``, PostgreSQL's stock durability: fsync, synchronous_commit and
    full_page_writes on; else the test settings, all three off)."""
    if url:
        yield url.replace("postgresql+asyncpg://", "postgresql://", 1)
        return
    env = dict(os.environ, PG_EPHEMERAL_NAME=f"hipq-benchrun-{os.getpid()}"
               + ("-durable" if durable else ""), PG_EPHEMERAL_DURABLE="1" if durable else "0",
               PG_EPHEMERAL_SETTINGS=PRELOAD)  # statements per job (bench/pg_costs.py)
    try:
        out = subprocess.run([str(PG_EPHEMERAL), "start"], env=env, check=True,
                             capture_output=True, text=True, timeout=180).stdout
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"scripts/pg-ephemeral could not start: {exc.stderr}") from None
    try:
        yield out.strip().splitlines()[-1].split("=", 1)[1]
    finally:
        subprocess.run([str(PG_EPHEMERAL), "stop"], env=env, check=False,
                       capture_output=True, timeout=180)


def with_database(server: str, database: str) -> str:
    return f"{server.rpartition('/')[0]}/{database}"


async def fresh_database(server: str, name: str) -> str:
    """Drop and create ``name``; its plain ``postgresql://`` URL."""
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    return with_database(server, name)


async def drop_database(server: str, name: str) -> None:
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await conn.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- the daemon under test ------------------------------------------------------------


@dataclass
class RssSampler:
    """Samples a process's RSS every 50 ms; ``peak_mb`` is the highest seen."""

    pid: int
    samples: list[tuple[float, float]] = field(default_factory=list)
    cpu_s: float = 0.0  # user + system CPU seconds of the process, at the last sample
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        proc = psutil.Process(self.pid)
        with contextlib.suppress(psutil.Error):
            while True:
                self.samples.append((time.time(), proc.memory_info().rss / 2**20))
                cpu = proc.cpu_times()
                self.cpu_s = cpu.user + cpu.system
                await asyncio.sleep(RSS_SAMPLE_SECONDS)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def peak_mb(self) -> float:
        return max((mb for _, mb in self.samples), default=0.0)

    def peak_between(self, start: float, end: float) -> float:
        return max((mb for t, mb in self.samples if start <= t <= end), default=0.0)

    @property
    def last_mb(self) -> float:
        return self.samples[-1][1] if self.samples else 0.0


@dataclass
class Daemon:
    """A running ``hipq run`` subprocess."""

    proc: asyncio.subprocess.Process
    pid: int  # the hipq process (under py-spy, py-spy's child)
    base_url: str
    rss: RssSampler
    log_path: Path


def hipq_config(database_url: str, port: int, queues: list[dict[str, Any]],
                reconcile: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "database": {"url": database_url.replace("postgresql://", "postgresql+asyncpg://", 1)},
        "api": {"host": "127.0.0.1", "port": port},
        # HIPQ_BENCH_RECONCILE: a JSON object merged into every daemon's reconcile
        # settings, to try one (e.g. '{"fetch_limit": 500}'); unset in the published runs
        "reconcile": {"interval_seconds": 5, **(reconcile or {}),
                      **json.loads(os.environ.get("HIPQ_BENCH_RECONCILE", "{}"))},
        "logging": {"level": "INFO"},
        "queues": queues,
    }


@asynccontextmanager
async def hipq_daemon(config: dict[str, Any], workdir: Path, name: str,
                      py_spy: Path | None = None) -> AsyncIterator[Daemon]:
    """Start ``hipq -c <config> run`` (logs to ``<workdir>/<name>.log``), wait for
    ``/healthz``, sample its RSS; SIGTERM it at the end (SIGKILL after 30 s)."""
    cfg = workdir / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    log_path = workdir / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if k != "HIPQ_DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH), env.get("PYTHONPATH")]))
    argv = [HIPQ, "-c", str(cfg), "run"]
    if py_spy is not None:
        argv = [py_spy_binary(), "record", "--rate", "1000", "--format", "raw",
                "--output", str(workdir / f"{name}.pyspy.txt"), "--", *argv]
    with log_path.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=out, stderr=out, env=env,
                                                    cwd=str(workdir))
    pid = proc.pid
    rss: RssSampler | None = None
    try:
        pid = await _hipq_pid(proc.pid, py_spy is not None)
        rss = RssSampler(pid)
        rss.start()
        base = f"http://127.0.0.1:{config['api']['port']}"
        await _wait_healthy(base, proc, log_path)
        yield Daemon(proc=proc, pid=pid, base_url=base, rss=rss, log_path=log_path)
    finally:
        await _terminate(proc, pid)
        if rss is not None:
            await rss.stop()


def py_spy_binary() -> str:
    candidate = Path(PYTHON).with_name("py-spy")
    return str(candidate) if candidate.exists() else "py-spy"


async def _hipq_pid(pid: int, wrapped: bool) -> int:
    if not wrapped:
        return pid
    for _ in range(100):
        children = psutil.Process(pid).children()
        if children:
            return int(children[0].pid)
        await asyncio.sleep(0.05)
    raise SystemExit("py-spy did not start hipq")


async def _wait_healthy(base: str, proc: asyncio.subprocess.Process, log_path: Path) -> None:
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.returncode is not None:
                raise SystemExit(f"hipq run exited with {proc.returncode}; see {log_path}:\n"
                                 + tail(log_path))
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(f"{base}/healthz") as answer:
                    if answer.status == 200:
                        return
            await asyncio.sleep(0.05)
    raise SystemExit(f"hipq run did not become healthy in 60 s; see {log_path}")


async def _terminate(proc: asyncio.subprocess.Process, pid: int) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)  # the hipq process itself (py-spy then writes its file)
    try:
        await asyncio.wait_for(proc.wait(), 30)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


# -- the downstream -------------------------------------------------------------------


@asynccontextmanager
async def downstream(mode: str, *, record: bool = False,
                     hipq_url: str | None = None) -> AsyncIterator[str]:
    """bench/downstream.py in its own process; yields its base URL. ``hipq_url``:
    where callbacks may go (callback mode)."""
    argv = [PYTHON, str(BENCH / "downstream.py"), "--mode", mode]
    if hipq_url is not None:
        argv += ["--hipq-url", hipq_url]
    if record:
        argv.append("--record")
    if os.environ.get("HIPQ_BENCH_HAND_WRITTEN"):  # compare with the hand-written handler
        argv.append("--hand-written")
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip()
        if not line.startswith("PORT="):
            raise SystemExit(f"bench/downstream.py did not start: {line!r}")
        yield f"http://127.0.0.1:{line.split('=', 1)[1]}"
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


# -- numbers --------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def pcts(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "max": None}
    return {"n": len(values), "p50": round(percentile(values, 50), 2),
            "p95": round(percentile(values, 95), 2), "p99": round(percentile(values, 99), 2),
            "max": round(max(values), 2)}


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cores": os.cpu_count(), "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "cpu": model, "platform": platform.platform(),
            "python": platform.python_version()}


def tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:]

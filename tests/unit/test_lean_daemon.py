"""A daemon's memory (issue 28): importing the daemon, and running one on PostgreSQL
with no Kafka section, loads neither SQLAlchemy (about 23 MB: the PostgreSQL driver
runs on an asyncpg pool) nor aiokafka (only a Kafka target or response topic needs
it), and until ``/metrics`` is scraped no prometheus_client (about 1 MB:
hipq/metrics.py counts in dictionaries). Checked in a fresh interpreter, by
``sys.modules``, so that a new import cannot bring them back unnoticed. SQLite's
driver is SQLAlchemy Core and keeps it. ``hipq run`` loads frozenlist without its
C++ extension (hipq.cli.lean_imports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# APScheduler stays: it fires the periodic tick (docs/internals.md, "When a tick runs")
HEAVY = ("sqlalchemy", "aiokafka", "prometheus_client")

RUN_DAEMON = """
import asyncio, json, sys

import hipq.cli.commands  # what `hipq run` imports
from hipq.config import Settings
from hipq.daemon import Daemon


async def main(url: str) -> None:
    settings = Settings.model_validate({
        "database": {"url": url}, "api": {"host": "127.0.0.1", "port": 0},
        "queues": [{"id": "q", "target": {"kind": "http", "url": "http://127.0.0.1:9/x"}}]})
    daemon = Daemon(settings)
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(daemon.run(stop=stop, ready=ready))
    await ready.wait()
    await daemon.tick()
    stop.set()
    await task


asyncio.run(main(sys.argv[1]))
print(json.dumps(sorted({m.partition(".")[0] for m in sys.modules} & set(sys.argv[2:]))))
"""


def _loaded(code: str, *args: str) -> list[str]:
    """The HEAVY packages in ``sys.modules`` after ``code`` ran in a fresh interpreter
    (its last line of output, a JSON list)."""
    out = subprocess.run([sys.executable, "-c", code, *args, *HEAVY], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    loaded: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


def test_importing_the_daemon_loads_none_of_them() -> None:
    code = ("import json, sys, hipq.daemon, hipq.cli.commands, hipq.store.postgres; "
            "print(json.dumps(sorted({m.partition('.')[0] for m in sys.modules} "
            "& set(sys.argv[1:]))))")
    assert _loaded(code) == []


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_postgresql_daemon_without_kafka_runs_without_them(db_url: str) -> None:
    """Open, migrate, apply a queue, serve the API, tick, stop: on PostgreSQL with no
    ``kafka`` section, no schedules and no scrape, none is ever imported."""
    assert _loaded(RUN_DAEMON, db_url) == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_sqlite_daemon_without_kafka_loads_no_aiokafka(db_url: str) -> None:
    loaded = _loaded(RUN_DAEMON, db_url)
    assert loaded == ["sqlalchemy"]


SCRAPE_AND_SCHEDULE = """
import asyncio, json, sys, urllib.request

from hipq.config import Settings
from hipq.daemon import Daemon


async def main(url: str) -> None:
    settings = Settings.model_validate({
        "database": {"url": url}, "api": {"host": "127.0.0.1", "port": 0},
        "queues": [{"id": "q", "target": {"kind": "http", "url": "http://127.0.0.1:9/x"}}],
        "schedules": [{"id": "s", "queue": "q", "cron": "0 3 * * *"}]})
    daemon = Daemon(settings)
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(daemon.run(stop=stop, ready=ready))
    await ready.wait()
    await daemon.tick()
    before = sorted({m.partition(".")[0] for m in sys.modules} & set(sys.argv[2:]))
    page = await asyncio.to_thread(
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{daemon.api_port}/metrics").read())
    assert b"hipq_tick_duration_seconds_count" in page, page[:500]
    stop.set()
    await task
    print(json.dumps(before))


asyncio.run(main(sys.argv[1]))
print(json.dumps(sorted({m.partition(".")[0] for m in sys.modules} & set(sys.argv[2:]))))
"""


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_scrape_loads_prometheus_client(db_url: str) -> None:
    """The first ``/metrics`` scrape imports prometheus_client (and answers); the
    daemon runs its tick and the schedules on APScheduler."""
    out = subprocess.run([sys.executable, "-c", SCRAPE_AND_SCHEDULE, db_url, *HEAVY],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    before, after = (json.loads(line) for line in out.stdout.strip().splitlines()[-2:])
    assert "prometheus_client" not in before
    assert "prometheus_client" in after


LEAN = """
import json, os, sys
from hipq.cli import lean_imports
lean_imports()
import aiohttp.web  # noqa: F401
import frozenlist
print(json.dumps([frozenlist.FrozenList.__module__, os.environ.get("FROZENLIST_NO_EXTENSIONS"),
                  any("stdc++" in line for line in open("/proc/self/maps"))]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
@pytest.mark.parametrize(("env", "expected"), [
    (None, ["frozenlist", None, False]),  # pure Python, the variable gone again
    ("", ["frozenlist._frozenlist", "", True]),  # set (even empty): the user decides
])
def test_hipq_run_loads_frozenlist_without_its_cpp_extension(
        env: str | None, expected: list[object]) -> None:
    environ = {k: v for k, v in os.environ.items() if k != "FROZENLIST_NO_EXTENSIONS"}
    if env is not None:
        environ["FROZENLIST_NO_EXTENSIONS"] = env
    out = subprocess.run([sys.executable, "-c", LEAN], capture_output=True, text=True,
                         timeout=60, env=environ)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected


@pytest.mark.parametrize(("command", "status", "module"), [
    ("run", 2, "frozenlist"), ("check-config", 0, "frozenlist._frozenlist")])
def test_only_the_daemon_command_runs_lean_imports(tmp_path: Path, command: str,
                                                  status: int, module: str) -> None:
    """``hipq run`` calls lean_imports before its module imports aiohttp (here it
    stops at a config error right after); the other commands keep the extension."""
    (tmp_path / "hipq.yaml").write_text("api: {host: 0.0.0.0}\n")  # no tokens: refused
    code = ("import sys\nfrom hipq.cli import main\ncode = main(sys.argv[1:])\n"
            "import frozenlist\nprint(frozenlist.FrozenList.__module__)\nsys.exit(code)")
    environ = {k: v for k, v in os.environ.items()
               if k != "FROZENLIST_NO_EXTENSIONS" and not k.startswith("HIPQ_")}
    out = subprocess.run([sys.executable, "-c", code, "-c", "hipq.yaml", command],
                         capture_output=True, text=True, timeout=60, env=environ,
                         cwd=tmp_path)
    assert out.returncode == status, out.stderr[-3000:]  # run: the config error
    assert out.stdout.strip().splitlines()[-1] == module

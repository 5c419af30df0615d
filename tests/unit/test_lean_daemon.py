"""A daemon's memory (issue 28): importing the daemon, and running one on PostgreSQL
with no Kafka section, loads neither SQLAlchemy (about 23 MB: the PostgreSQL driver
runs on an asyncpg pool) nor aiokafka (only a Kafka target or response topic needs
it). Checked in a fresh interpreter, by ``sys.modules``, so that a new import cannot
bring them back unnoticed. SQLite's driver is SQLAlchemy Core and keeps it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("sqlalchemy", "aiokafka")

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


def test_importing_the_daemon_loads_neither_sqlalchemy_nor_aiokafka() -> None:
    code = ("import json, sys, hipq.daemon, hipq.cli.commands, hipq.store.postgres; "
            "print(json.dumps(sorted({m.partition('.')[0] for m in sys.modules} "
            "& set(sys.argv[1:]))))")
    assert _loaded(code) == []


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_postgresql_daemon_without_kafka_runs_without_them(db_url: str) -> None:
    """Open, migrate, apply a queue, serve the API, tick, stop: on PostgreSQL with no
    ``kafka`` section, neither is ever imported."""
    assert _loaded(RUN_DAEMON, db_url) == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_sqlite_daemon_without_kafka_loads_no_aiokafka(db_url: str) -> None:
    loaded = _loaded(RUN_DAEMON, db_url)
    assert loaded == ["sqlalchemy"]

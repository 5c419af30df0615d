"""The examples run end to end: ``examples/producer.py`` against a real ``hipq run``
(SQLite and PostgreSQL) whose jobs go to ``examples/http_downstream.py`` and to
``examples/kafka_responder.py`` (the real broker), each in its own process."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.api.conftest import ADMIN
from tests.kafka.conftest import create_topics, name
from tests.kit.conftest import ROOT, HipqRun, child_env, read, wait_for_line
from tests.kit.test_client import _free_port

pytestmark = pytest.mark.slow
EXAMPLES = ROOT / "examples"


@asynccontextmanager
async def example(tmp_path: Path, script: str, *args: str,
                  ready: str | None = None) -> AsyncIterator[Callable[[], str]]:
    """Run an example in its own process until the block ends (SIGTERM)."""
    log_path = tmp_path / f"{script}.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(  # noqa: ASYNC220 (returns at once; the block owns it)
            [sys.executable, str(EXAMPLES / script), *args], cwd=tmp_path, env=child_env(),
            stdout=log, stderr=subprocess.STDOUT)
    try:
        if ready is not None:
            await wait_for_line(log_path, ready, proc)
        yield lambda: read(log_path)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 30)


async def produce(hipq_url: str, *args: str) -> str:
    env = child_env() | {"HIPQ_TOKEN": ADMIN}
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(EXAMPLES / "producer.py"), hipq_url, *args],
        env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def check_output(out: str) -> None:
    assert "hello-ada: created" in out
    assert "hello-ada: exists" in out  # the batch repeats it: idempotent
    assert "hello-grace: succeeded {'greeting': 'hello, Grace'}" in out
    assert "hello-barbara: succeeded {'greeting': 'hello, Barbara'}" in out
    assert "hello-nobody: failed" in out
    assert "whom should I greet?" in out


async def test_producer_and_http_downstream(tmp_path: Path, hipq_run: HipqRun) -> None:
    url = await hipq_run()
    port = _free_port()
    async with example(tmp_path, "http_downstream.py", str(port), url, ready="Running on"):
        check_output(await produce(url, "--http", f"http://127.0.0.1:{port}"))


async def test_producer_and_kafka_responder(tmp_path: Path, hipq_run: HipqRun,
                                            kafka_bootstrap: str) -> None:
    requests, responses = name("ex-req"), name("ex-resp")
    await create_topics(kafka_bootstrap, requests, responses)
    url = await hipq_run(kafka={"bootstrap_servers": kafka_bootstrap,
                                "group_id": name("ex-hipq"), "response_topics": [responses],
                                "session_timeout_ms": 2000, "heartbeat_interval_ms": 200})
    async with example(tmp_path, "kafka_responder.py", kafka_bootstrap, requests, responses,
                       name("ex-responder")):
        check_output(await produce(url, "--kafka", requests))

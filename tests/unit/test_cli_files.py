"""The CLI as a shell user meets it (real ``hipq`` subprocesses, SQLite): a reader
that leaves the pipe early, a directory with no config, ``-c`` from another
directory, a target path written with a dot."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hipq.bodies import EnqueueRequest
from hipq.cli import EXIT_PIPE
from hipq.service import Hipq
from hipq.store import open_store

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.slow  # hipq processes, one a command
TARGET = "async def greet(job, **options):\n    return {'greeting': 'hi ' + job.data['name']}\n"


def hipq(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hipq", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=60, check=False)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hipq: error: ")
    return lines[0]


async def _enqueue_many(db: Path, queue: str, count: int) -> None:
    store = await open_store(f"sqlite+aiosqlite:///{db}")
    try:
        await Hipq(store).enqueue_many(queue, [(f"job-{n:05d}", EnqueueRequest(
            data={"pad": "x" * 200})) for n in range(count)])
    finally:
        await store.close()


def test_a_reader_that_leaves_the_pipe_early_gets_no_traceback(tmp_path: Path) -> None:
    """``hipq jobs q --json | head -1`` through a real shell pipe: 1,000 lines of
    about 700 bytes fill the pipe long before hipq is done writing."""
    (tmp_path / "hipq.yaml").write_text("queues:\n  - id: q\n    paused: true\n")
    assert hipq(tmp_path, "migrate").returncode == 0
    asyncio.run(_enqueue_many(tmp_path / "hipq.db", "q", 1000))
    for command, statuses in (("hipq jobs q --json --limit 1000", {EXIT_PIPE}),
                              # one write of 85 kB: head may have read it all already
                              ("hipq jobs q --limit 1000", {0, EXIT_PIPE})):
        piped = subprocess.run(
            ["bash", "-c", f"{sys.executable} -m {command} | head -1; "
                           'echo "status ${PIPESTATUS[0]}" >&2'],
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60, check=False)
        assert len(piped.stdout.splitlines()) == 1, piped.stdout[:300]
        # no traceback, no "Exception ignored" at exit: only the status echoed above
        assert piped.stderr in {f"status {s}\n" for s in statuses}, piped.stderr


def test_without_config_or_database_nothing_is_created(tmp_path: Path) -> None:
    for command in (["status"], ["jobs", "q"], ["status", "--json"], ["pause", "q"],
                    ["enqueue", "q"], ["prune"], ["intake"]):
        line = _one_error_line(hipq(tmp_path, *command))
        assert "no config here" in line, line
        assert "no database (hipq.db)" in line, line
        assert "version None" not in line
    checked = hipq(tmp_path, "check-config")
    assert checked.returncode == 0, checked.stderr
    assert "hipq.db not created yet" in checked.stdout
    assert list(tmp_path.iterdir()) == []  # read-only commands never create a database


def test_with_a_config_but_no_database_yet(tmp_path: Path) -> None:
    (tmp_path / "hipq.yaml").write_text("queues:\n  - id: q\n")
    line = _one_error_line(hipq(tmp_path, "status"))
    assert f"no database at {tmp_path / 'hipq.db'} (config ./hipq.yaml)" in line, line
    assert "run 'hipq migrate' or 'hipq run'" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hipq.yaml"]


def test_config_from_another_directory_finds_its_targets_and_its_database(
        tmp_path: Path) -> None:
    """``-c conf/hipq.yaml`` from elsewhere: ``conf/mytargets.py`` is imported and
    the relative SQLite path lands in ``conf/``, not in the current directory."""
    conf, elsewhere = tmp_path / "conf", tmp_path / "elsewhere"
    conf.mkdir()
    elsewhere.mkdir()
    (conf / "hipq.yaml").write_text(
        'database: {url: "sqlite+aiosqlite:///hipq.db"}\nqueues:\n  - id: greetings\n'
        '    target: {kind: python, function: "mytargets_conf27:greet"}\n')
    (conf / "mytargets_conf27.py").write_text(TARGET)
    config = str(Path("..") / "conf" / "hipq.yaml")
    checked = hipq(elsewhere, "-c", config, "check-config")
    assert checked.returncode == 0, checked.stderr
    assert hipq(elsewhere, "migrate", "-c", config).returncode == 0
    assert (conf / "hipq.db").exists()
    assert list(elsewhere.iterdir()) == []
    enqueued = hipq(elsewhere, "-c", config, "enqueue", "greetings", "--data", '{"name": "x"}')
    assert enqueued.returncode == 0, enqueued.stderr
    shown = hipq(elsewhere, "-c", config, "status")
    assert "greetings" in shown.stdout, shown.stderr


@pytest.mark.parametrize("field", ["target: {kind: python, function: mytargets.greet}",
                                   "retry: {plugin: mine.Retry}"])
def test_a_dotted_target_path_says_use_module_function(tmp_path: Path, field: str) -> None:
    (tmp_path / "hipq.yaml").write_text(f"queues:\n  - id: q\n    {field}\n")
    line = _one_error_line(hipq(tmp_path, "check-config"))
    assert "is not a module:function path: use module:function" in line, line
    assert "should match pattern" not in line
    dotted = field.split(": ")[-1].rstrip("}")
    module, _, attr = dotted.rpartition(".")
    assert f"({module}:{attr})" in line, line

"""The operator's commands against the database (no daemon), on SQLite and
PostgreSQL; where ``-c`` and the config come from; fast ``--help``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hipq.cli import main

ROOT = Path(__file__).parents[2]


def _config(tmp_path: Path, db_url: str, extra: str = "") -> str:
    path = tmp_path / "ops.yaml"
    path.write_text(f"database:\n  url: {db_url}\nqueues:\n  - id: q\n    attempts: 2\n"
                    f"  - id: other\n{extra}")
    return str(path)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_operator_commands(tmp_path: Path, db_url: str,
                           capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path, db_url)
    _run(capsys, "migrate", "-c", cfg)  # -c after the command
    for i, prio in enumerate([5, 1, 3]):
        _run(capsys, "-c", cfg, "enqueue", "q", "--id", f"j{i}", "--priority", str(prio))
    out = _run(capsys, "jobs", "q", "-c", cfg, "--json")
    assert [json.loads(line)["id"] for line in out.splitlines()] == ["j0", "j1", "j2"]
    assert "j1" in _run(capsys, "jobs", "q", "-c", cfg, "--limit", "2")
    assert "(no running jobs)" in _run(capsys, "jobs", "q", "-c", cfg, "--state", "running")

    assert "paused" in _run(capsys, "pause", "q", "-c", cfg)
    status = json.loads(_run(capsys, "status", "--json", "-c", cfg))
    by_queue = {q["queue"]: q for q in status["queues"]}
    assert by_queue["q"]["paused"] is True
    assert by_queue["q"]["queued"] == 3
    assert "q (paused)" in _run(capsys, "status", "-c", cfg)
    _run(capsys, "resume", "q", "-c", cfg)
    assert json.loads(_run(capsys, "status", "--json", "-c", cfg))["queues"][1]["paused"] is False

    assert "status cancelled" in _run(capsys, "cancel", "q", "j1", "-c", cfg)
    cancelled = _run(capsys, "jobs", "q", "-c", cfg, "--state", "cancelled", "--json")
    assert [json.loads(line)["id"] for line in cancelled.splitlines()] == ["j1"]
    shown = json.loads(_run(capsys, "show", "q", "j1", "-c", cfg))
    assert shown["status"] == "cancelled"
    replayed = json.loads(_run(capsys, "replay", "q", "j1", "-c", cfg))
    assert replayed["replay_of"] == "j1"
    assert replayed["status"] == "queued"
    assert "pruned 0 " in _run(capsys, "prune", "-c", cfg)
    assert "pruned 1 " in _run(capsys, "prune", "-c", cfg, "--older-than-days", "0")
    assert _run(capsys, "jobs", "q", "-c", cfg, "--state", "cancelled", "--json") == ""


def test_operator_errors(tmp_path: Path, db_url: str,
                         capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path, db_url)
    _run(capsys, "migrate", "-c", cfg)
    for argv, needle in [(["cancel", "q", "nope"], "nope"), (["pause", "nope"], "nope"),
                         (["jobs", "nope"], "nope"), (["jobs", "q", "--limit", "0"], "--limit"),
                         (["prune", "--older-than-days", "-1"], "older-than-days")]:
        assert main([*argv, "-c", cfg]) != 0
        _, err = capsys.readouterr()
        assert err.startswith("hipq: error: "), err
        assert needle in err, err


def test_config_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path, f"sqlite+aiosqlite:///{tmp_path}/env.db")
    monkeypatch.setenv("HIPQ_CONFIG", cfg)
    monkeypatch.chdir(tmp_path)
    _run(capsys, "migrate")
    assert (tmp_path / "env.db").exists()
    assert "other" in _run(capsys, "status")


def _hipq(cwd: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-m", "hipq", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=timeout, check=False)


def test_version_and_fast_help(tmp_path: Path) -> None:
    import hipq

    assert _hipq(tmp_path, "--version").stdout.strip() == f"hipq {hipq.__version__}"
    probe = ("import sys\nfrom hipq.cli import main\n"
             "try:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass\n"
             "heavy = [m for m in ('sqlalchemy', 'pydantic', 'aiohttp', 'hipq.config') "
             "if m in sys.modules]\nprint('HEAVY', heavy)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60, check=True)
    assert "HEAVY []" in result.stdout
    assert "examples:" in result.stdout
    assert "hipq run -c hipq.yaml" in result.stdout


def test_targets_beside_the_config_import_from_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "mytargets.py").write_text("async def send(job):\n    return {'ok': True}\n")
    (tmp_path / "hipq.yaml").write_text(
        f"database:\n  url: sqlite+aiosqlite:///{tmp_path}/h.db\nqueues:\n  - id: q\n"
        "    target: {kind: python, function: 'mytargets:send'}\n")
    result = _hipq(tmp_path, "check-config")
    assert result.returncode == 0, result.stderr


def test_check_config_names_the_file_and_needs_kafka_for_kafka_targets(tmp_path: Path) -> None:
    cfg = tmp_path / "k.yaml"
    cfg.write_text(f"database:\n  url: sqlite+aiosqlite:///{tmp_path}/h.db\nqueues:\n  - id: q\n"
                   "    target: {kind: kafka, topic: jobs}\n")
    result = _hipq(tmp_path, "check-config", "-c", str(cfg))
    assert result.returncode != 0
    assert str(cfg) in result.stderr
    assert "'kafka:' section" in result.stderr
    cfg.write_text(f"database:\n  url: sqlite+aiosqlite:///{tmp_path}/h.db\nqueues:\n  - id: q\n"
                   "    retry: {plugin: 'nowhere:Thing'}\n")
    result = _hipq(tmp_path, "check-config", "-c", str(cfg))
    assert str(cfg) in result.stderr
    assert "queues[0] (q)" in result.stderr


def test_status_watch_refreshes_until_interrupted(tmp_path: Path) -> None:
    cfg = tmp_path / "w.yaml"
    cfg.write_text(f"database:\n  url: sqlite+aiosqlite:///{tmp_path}/w.db\nqueues:\n  - id: q\n")
    assert _hipq(tmp_path, "migrate", "-c", str(cfg)).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    proc = subprocess.Popen([sys.executable, "-m", "hipq", "status", "--watch", "--interval",
                             "0.1", "-c", str(cfg)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    frames = 0
    for line in proc.stdout:
        frames += line.startswith("hipq status at")
        if frames == 3:
            break
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0

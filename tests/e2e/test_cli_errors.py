"""Bad config files and bad commands exit non-zero with one paragraph, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def hipq(tmp_path: Path, *args: str, config: str | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "hipq"]
    if config is not None:
        path = tmp_path / "cfg.yaml"
        path.write_text(config)
        argv += ["-c", str(path)]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    full_env["PYTHONPATH"] = str(ROOT)
    full_env.update(env or {})
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env=full_env, check=False)


def assert_clean_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hipq: error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


SQLITE = "database:\n  url: sqlite+aiosqlite:///{db}\n"


@pytest.mark.parametrize("command", ["run", "check-config"])
@pytest.mark.parametrize(
    ("config", "needles"),
    [
        ("queues:\n  - id: q\n    concurrency: '5x'\n", ["queues[0].concurrency", "integer"]),
        ("queues:\n  - id: q\n    concurency: 5\n", ["queues[0].concurency", "unknown key"]),
        ("queues:\n  - id: q\n    throttler: {plugin: 'nowhere.mod:Thing'}\n",
         ["queues[0] (q)", "cannot import module 'nowhere.mod'"]),
        ("queues:\n  - id: q\n    retry: {plugin: 'hipq.contrib.retries:Missing'}\n",
         ["queues[0] (q)", "has no attribute 'Missing'"]),
        ("queues:\n  - id: q\n    retry: {strategy: fibonacci}\n",
         ["unknown retry strategy 'fibonacci'"]),
        ("queues:\n  - id: q\n    target: {kind: python, "
         "function: 'hipq.contrib.example_targets:nope'}\n",
         ["queues[0] (q)", "has no attribute 'nope'"]),
        ("queues:\n  - id: q\n    retry: {strategy: fixed, delay: 3}\n",
         ["retry strategy 'fixed': unknown option 'delay'"]),
    ],
)
def test_bad_config_exits_with_one_paragraph(tmp_path: Path, command: str, config: str,
                                             needles: list[str]) -> None:
    config = SQLITE.format(db=tmp_path / "h.db") + config
    assert_clean_error(hipq(tmp_path, command, config=config), *needles)


@pytest.mark.parametrize("command", ["run", "check-config", "migrate", "status"])
def test_unreachable_database(tmp_path: Path, command: str) -> None:
    config = "database:\n  url: postgresql+asyncpg://postgres@127.0.0.1:9/nowhere\n"
    assert_clean_error(hipq(tmp_path, command, config=config), "cannot reach the database",
                       "127.0.0.1:9/nowhere")


def test_unsupported_database_url(tmp_path: Path) -> None:
    config = "database:\n  url: mysql://x@y/z\n"
    assert_clean_error(hipq(tmp_path, "check-config", config=config), "unsupported database URL")


def test_missing_config_file(tmp_path: Path) -> None:
    result = hipq(tmp_path, "-c", str(tmp_path / "absent.yaml"), "check-config")
    assert_clean_error(result, "absent.yaml", "cannot read the config file")


def test_status_before_migrate_says_what_to_do(tmp_path: Path) -> None:
    config = SQLITE.format(db=tmp_path / "fresh.db")
    assert_clean_error(hipq(tmp_path, "status", config=config), "run 'hipq migrate'")


def test_enqueue_bad_input(tmp_path: Path) -> None:
    # no API (port 0): whatever listens on this machine's 8080, the default port, is
    # none of this test's business (an unproven listener there earns a warning line)
    config = SQLITE.format(db=tmp_path / "h.db") + "api:\n  port: 0\nqueues:\n  - id: q\n"
    assert hipq(tmp_path, "migrate", config=config).returncode == 0
    assert_clean_error(hipq(tmp_path, "enqueue", "q", "--data", "{oops", config=config),
                       "--data: not valid JSON")
    assert_clean_error(hipq(tmp_path, "enqueue", "q", "--data", "[1]", config=config),
                       "must be a JSON object")
    assert_clean_error(hipq(tmp_path, "enqueue", "nope", config=config),
                       "queue 'nope' does not exist")
    assert_clean_error(hipq(tmp_path, "enqueue", "q", "--id", "bad id!", config=config),
                       "id")


def test_check_config_ok(tmp_path: Path) -> None:
    result = hipq(tmp_path, "check-config", config=SQLITE.format(db=tmp_path / "h.db")
                  + "queues:\n  - id: q\n    target: {kind: python, function: "
                    "'hipq.contrib.example_targets:greet'}\n")
    assert result.returncode == 0, result.stderr
    assert "config OK: 1 queue(s)" in result.stdout


def test_run_refuses_a_non_loopback_host_without_tokens(tmp_path: Path) -> None:
    """docs/security.md: no tokens, not loopback, no ``api.allow_insecure``: ``hipq run`` stops."""
    config = SQLITE.format(db=tmp_path / "h.db") + "api:\n  host: 0.0.0.0\n  port: 0\n"
    result = hipq(tmp_path, "run", config=config)
    assert_clean_error(result, "api.host '0.0.0.0'", "api.allow_insecure")
    assert result.returncode == 2
    assert not (tmp_path / "h.db").exists()  # refused before anything was opened


def test_check_config_warns_of_lease_and_interval_that_make_no_sense(tmp_path: Path) -> None:
    result = hipq(tmp_path, "check-config", config=SQLITE.format(db=tmp_path / "h.db")
                  + "reconcile: {interval_seconds: 10, lease_seconds: 0.5}\n")
    assert result.returncode == 0, result.stderr
    assert "config OK" in result.stdout
    assert "warning: reconcile.lease_seconds is 0.5" in result.stderr
    assert "reconcile.interval_seconds (10) is not shorter" in result.stderr
    quiet = hipq(tmp_path, "check-config", config=SQLITE.format(db=tmp_path / "h.db"))
    assert "warning" not in quiet.stderr

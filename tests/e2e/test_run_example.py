"""The README's run command, minus the install: migrate, enqueue the example job,
``hipq run`` on SQLite with config.example.yaml, the job succeeds, SIGTERM stops it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_example_config_processes_a_job_end_to_end(tmp_path: Path) -> None:
    shutil.copy(ROOT / "config.example.yaml", tmp_path / "config.example.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = str(ROOT)
    env["HIPQ_PORT"] = "0"  # any free port: 8080 may be taken on this machine

    def hipq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hipq", "-c", "config.example.yaml", *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                              check=False)

    assert hipq("migrate").returncode == 0
    enqueued = hipq("enqueue", "greetings", "--id", "hello-world", "--data", '{"name": "world"}')
    assert json.loads(enqueued.stdout) == {"id": "hello-world", "status": "created"}
    again = hipq("enqueue", "greetings", "--id", "hello-world", "--data", '{"name": "world"}')
    assert json.loads(again.stdout)["status"] == "exists"

    log = (tmp_path / "run.log").open("w")
    daemon = subprocess.Popen([sys.executable, "-m", "hipq", "-c", "config.example.yaml", "run"],
                              cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        job: dict[str, object] = {}
        while time.monotonic() < deadline:
            shown = hipq("show", "greetings", "hello-world")
            job = json.loads(shown.stdout)
            if job["status"] == "succeeded":
                break
            time.sleep(0.2)  # polling a subprocess: there is no signal to wait on
        assert job["status"] == "succeeded", (tmp_path / "run.log").read_text()
        assert job["result"] == {"greeting": "hello, world"}
        assert [h["outcome"] for h in job["history"]] == ["succeeded"]  # type: ignore[union-attr]
    finally:
        daemon.send_signal(signal.SIGTERM)
        code = daemon.wait(timeout=20)
        log.close()
    assert code == 0, (tmp_path / "run.log").read_text()
    assert "Traceback" not in (tmp_path / "run.log").read_text()

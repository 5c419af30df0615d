"""``hipq demo`` end to end, as a user runs it: exit 0 within 60 s, progress shown,
the dashboard URL while it runs, a summary; ``--keep-running`` stays up."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}


def test_demo_finishes_with_a_summary(tmp_path: Path) -> None:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "hipq", "demo", "--jobs", "80", "--seed",
                             "7"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                            timeout=90, check=False)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert elapsed < 60
    out = result.stdout
    assert re.search(r"dashboard: http://127\.0\.0\.1:\d+/", out), out
    assert "progress: [" in out
    assert "70/70 jobs done" in out
    assert "summary after" in out
    for queue in ("emails", "partner-sync", "invoices", "night-reports"):
        assert queue in out
    assert out.rstrip().endswith("hipq demo: done")
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing left behind in the current directory


def test_demo_keep_running_serves_the_dashboard(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "hipq", "demo", "--jobs", "20",
                             "--keep-running"], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    url = None
    try:
        for line in proc.stdout:
            if line.startswith("dashboard: "):
                url = line.split()[1]
            if line.startswith("still running"):
                break
        assert url is not None
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.status == 200
            assert b"hipq" in page.read()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0

"""``hipq demo`` end to end, as a user runs it: exit 0 within 60 s, progress shown,
the dashboard URL while it runs, a summary (partner-api brought down to its
partner's 5 at once, every job succeeded, no attempt spent on a 429);
``--keep-running`` stays up; Ctrl-C stops the fake partner's process too."""

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
    result = subprocess.run([sys.executable, "-m", "hipq", "demo", "--jobs", "150", "--seed",
                             "7"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                            timeout=90, check=False)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert elapsed < 60
    out = result.stdout
    assert re.search(r"dashboard: http://127\.0\.0\.1:\d+/", out), out
    assert "progress: [" in out
    assert "140/140 jobs done" in out
    assert "summary after" in out
    for queue in ("emails", "partner-sync", "invoices", "night-reports", "partner-api"):
        assert queue in out
    # partner-api: 70% of the 140 jobs that flow, every one succeeded at its first attempt
    assert re.search(r"^partner-api +98 +0 +0 +\d+/30$", out, re.MULTILINE), out
    assert re.search(r"^partner-api: configured 30, its partner takes 5 at once: adaptive "
                     r"limit settled at 5 \(30 > \d+ > .* > 5 in [\d.]+ s, ", out,
                     re.MULTILINE), out
    partner = re.search(r"(\d+) throttled tries given back, no attempt spent; the partner "
                        r"accepted 98 and refused (\d+) \(429\), never more than 5 at once",
                        out)
    assert partner is not None, out
    assert int(partner[1]) == int(partner[2]) > 0  # each 429 was a throttled try given back
    assert out.rstrip().endswith("hipq demo: done")
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing left behind in the current directory


def _partners_of(pid: int) -> list[int]:
    """The fake partner processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and b"hipq.downstream.partner" in cmdline:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


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
        partners = _partners_of(proc.pid)
        assert len(partners) == 1  # the partner is still up while the demo stays up
    finally:
        proc.send_signal(signal.SIGINT)  # to the demo alone: it must stop its partner
        assert proc.wait(timeout=30) == 0
    assert not any(_alive(pid) for pid in partners)

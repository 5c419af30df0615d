"""Benchmark results live in one folder with one summary: no result file at the top
of ``bench/``, and ``bench/results/README.md`` lists every file it holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_no_result_file_lies_at_the_top_of_bench() -> None:
    stray = sorted(p.name for p in BENCH.glob("*.json"))
    assert stray == [], f"move these into bench/results/: {stray}"


def test_the_summary_lists_every_result_file() -> None:
    run = subprocess.run([sys.executable, str(BENCH / "summary.py"), "--check"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr

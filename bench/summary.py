"""One summary of every result file in ``bench/results/``: its date, the command or
note that made it, and the headline figures it holds (the ``null`` ones left out).

    python bench/summary.py            # rewrite bench/results/README.md
    python bench/summary.py --check    # exit 1 when README.md is not up to date

``docs/benchmarks.md`` keeps the history (what each pass found and why); this page
is the index of the raw files behind it. ``tests/unit/test_bench_results.py`` checks
that the summary lists every file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
SUMMARY = RESULTS / "README.md"
# The figures a reader compares across passes, in the order shown.
HEADLINES = (
    "durable_lifecycle_over_graphile", "durable_lifecycle_in_tick_over_graphile",
    "durable_lifecycle_jobs_per_s", "graphile_jobs_per_s", "lifecycle_jobs_per_s",
    "callback_jobs_per_s", "kafka_c1000_jobs_per_s", "kafka_unlimited_jobs_per_s",
    "hipq_over_procrastinate", "batch_enqueue_jobs_per_s", "sql_ingest_over_batch_api",
    "idle_rss_mb_100k_running", "idle_rss_mb_10q_1k_running", "partner_accepted_pct_x3_kill",
    "nginx_accepted_pct_req_sqlite", "nginx_accepted_pct_x3_kill", "partner_cost_min_share_pct",
    "partner_cost_max_refused_pct",
    "tick_ms_1k", "lost_jobs", "overshoots",
)
HEADER = """# Benchmark results

Raw result files of `bench/run` and the other benchmark commands, one per run or
pass. `docs/benchmarks.md` tells what each pass measured, on which machine, and
what it found; this index is made by `python bench/summary.py` (do not edit it by
hand). A figure absent here was not measured by that run.

| file | date | made by | headline figures |
| --- | --- | --- | --- |
"""


def _date(name: str, data: dict[str, Any]) -> str:
    found = re.search(r"\d{4}-\d{2}-\d{2}", name)
    if found:
        return found.group(0)
    for key in ("date", "started"):
        if isinstance(data.get(key), str):
            return str(data[key])[:10]
    return "-"


def _made_by(data: dict[str, Any]) -> str:
    for key in ("command", "about", "what", "note", "issue"):
        value = data.get(key)
        if isinstance(value, str) and value:
            text = " ".join(value.split())
            return (text[:90] + "...") if len(text) > 90 else text
    return "-"


def _figures(data: dict[str, Any]) -> str:
    shown = [f"{key} {data[key]}" for key in HEADLINES
             if isinstance(data.get(key), int | float) and not isinstance(data[key], bool)]
    return ", ".join(shown) or "(see the file: nested runs)"


def summary() -> str:
    rows = []
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        data = data if isinstance(data, dict) else {}
        cells = (f"`{path.name}`", _date(path.name, data), _made_by(data), _figures(data))
        rows.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return HEADER + "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when bench/results/README.md misses a result file")
    args = parser.parse_args()
    text = summary()
    if args.check:  # every file listed (a rerun that changed a file's figures is fine)
        current = SUMMARY.read_text(encoding="utf-8") if SUMMARY.exists() else ""
        missing = [p.name for p in sorted(RESULTS.glob("*.json")) if f"`{p.name}`" not in current]
        if missing:
            print(f"bench/results/README.md does not list {missing}: "
                  "run python bench/summary.py", file=sys.stderr)
            return 1
        return 0
    SUMMARY.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

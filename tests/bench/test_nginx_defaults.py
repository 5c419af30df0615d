"""hipq's defaults against nginx, small (``bench/nginx_defaults.py``; docs/throttling.md,
"What hipq does with no setting"; docs/benchmarks.md, "Partners: the defaults against
nginx").

A queue allowing 60 at once with no other setting (or two queues naming one
partner), an HTTP target in sync mode, in front of nginx's ``limit_req`` (100 r/s,
burst 10, a bare 429) and a backend answering in 50 ms, through real ``hipq run``
processes: one queue on SQLite, and two queues naming one partner on PostgreSQL.

Each run here has :data:`JOBS` jobs, about 25 s at the partner's 100 r/s: 10 s of
warm-up (from nginx's first request) and about 15 s measured, so that the two
runs take about 60 s together (the full benchmark, ``bench/run --only nginx``, runs
3,000 jobs a set-up).

The bounds. The refused share is the issue's goal, at most 5% of the requests after
the warm-up: runs on this 2-core machine, shared with other work (load averages of
2 to 5.7 while measuring), gave 0.8-2.9%. The accepted share has a generous bound,
:data:`MIN_ACCEPTED` (60% of 100 r/s), not the goal's 85%: one queue gave 87.6-97.4%
(SQLite and PostgreSQL, eight runs) and two queues naming one partner 82.7-96.2% (seven
runs, two under 85%), so on a loaded machine the goal is met most of the time, not
every time: the learned rate dips after each refusal (0.7 times, then climbing back),
and a daemon starved of CPU for a second (once, 1.6 s with no launch) costs a whole
second of a ~15 s window; inside the whole suite (four workers on two cores, load
average 6) two queues gave 64.9%. The bound catches a stall or a rate learned far
too low (the doubling pause before gave 10.6%);
the benchmark (``bench/run --only nginx``, docs/benchmarks.md) measures the goal.
Every job ends, none failed, and no attempt was spent on a refusal: those are exact
whatever the load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.nginx_defaults import MAX_REFUSED_SHARE, run
from bench.nginx_partner import NGINX, available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not available(), reason=f"nginx is not installed ({NGINX}; "
                                               "scripts/test installs Debian's nginx-light)"),
]

JOBS = 2500  # ~25 s at 100 r/s: 10 s of warm-up, ~15 s measured
MIN_ACCEPTED = 0.60  # see the docstring: a loaded machine's bound (the goal: 85%)
WITHIN = 120.0  # seconds a run may take before it is given up (it is then a failure)


def assert_defaults(report: dict[str, Any]) -> None:
    figures = {k: report[k] for k in ("accepted_share", "refused_share", "failed_jobs",
                                      "attempts_spent_on_refusals", "terminal", "requests",
                                      "after_warmup_requests", "longest_idle_after_warmup_s",
                                      "loadavg", "timeline")}
    assert report["terminal"] == JOBS, figures
    assert report["failed_jobs"] == 0, figures
    assert report["attempts_spent_on_refusals"] == 0, figures
    assert report["after_warmup_requests"] >= 1000, figures  # measured well past the warm-up
    assert report["accepted_share"] is not None, figures
    assert report["accepted_share"] >= MIN_ACCEPTED, figures
    assert report["refused_share"] <= MAX_REFUSED_SHARE, figures


async def defaults(tmp_path: Path, database: str, *, queues: int = 1) -> dict[str, Any]:
    return await run(database=database, limit="req", queues=queues, daemons=1,
                     kill_one=False, jobs=JOBS, workdir=tmp_path, within=WITHIN)


async def test_the_defaults_against_nginx_limit_req_on_sqlite(tmp_path: Path) -> None:
    assert_defaults(await defaults(tmp_path, "sqlite"))


async def test_two_queues_naming_one_partner_share_nginx_on_postgresql(
        tmp_path: Path, pg_url: str) -> None:
    assert_defaults(await defaults(tmp_path, pg_url, queues=2))

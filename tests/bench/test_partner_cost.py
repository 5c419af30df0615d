"""Cost budgets, small (``bench/partner_cost.py``; docs/throttling.md, "Partners";
docs/benchmarks.md, "Partners: cost budgets").

The test partner allows each API key 2,000 cost units and 50 requests a second and
reports each launch's actual cost (its estimate times a random factor of 0.5-1.5);
hipq declares the partner with the same figures, ``by: api_key`` and ``cost:
{estimate: estimate}``, and two queues name it. Jobs for two keys, with random
estimates, go into both queues, through a real ``hipq run`` on SQLite. Here the
window is :data:`SECONDS` s (the benchmark's is 30 s) after :data:`WARMUP` s.

What is exact whatever the load: every job ends, none failed, no attempt was spent
on a refusal, and the partner never refused for lack of requests (cost binds).

The shares have generous bounds, not the goal's (accepted cost at least 85% of each
key's budget, refused requests under 2%, which the 30 s benchmark measures:
docs/benchmarks.md, "Partners: cost budgets"). In a 10 s window on this 2-core
machine shared with other test runs (load averages of 5.5 to 7.8), keys gave 49-87%
of their budget and 0-2.9% refused (after a 3 s warm-up; 0-0.4% after 8 s). Each
refusal (an actual cost above its estimate, or a launch reaching the partner later
than hipq counted it) lowers that key's learned rate to 0.7 times the rate it was
launching at, and the rate climbs back slowly near there: a refusal heard while the
daemon was starved of CPU holds the key at 13-19 launches a second for more than
10 s. :data:`MIN_COST_SHARE` (40%) catches a budget left mostly idle (a held launch
nothing wakes, ``tests/engine/test_partner_cost_wake.py``, or a rate learned far
too low); :data:`MAX_REFUSED` (5%) catches hipq sending past the budget it declared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.partner_cost import KEYS, run

pytestmark = pytest.mark.slow

WARMUP = 8.0
SECONDS = 10.0
MIN_COST_SHARE = 0.4  # see the docstring: a loaded machine's bound (the goal: 85%)
MAX_REFUSED = 0.05  # the same (the goal: under 2%)


def figures(report: dict[str, Any]) -> dict[str, Any]:
    return {k: report[k] for k in ("keys", "failed_jobs", "attempts_spent_on_refusals",
                                   "terminal", "jobs", "window_ran_dry", "loadavg")}


async def test_two_queues_and_two_keys_keep_each_keys_cost_budget(tmp_path: Path) -> None:
    report = await run(database="sqlite", seconds=SECONDS, warmup=WARMUP, workdir=tmp_path,
                       within=120)
    seen = figures(report)
    assert report["terminal"] == report["jobs"], seen
    assert report["failed_jobs"] == 0, seen
    assert report["attempts_spent_on_refusals"] == 0, seen
    assert not report["window_ran_dry"], seen
    for key in KEYS:
        counted = report["keys"][key]
        assert counted["accepted"] > 0, seen
        assert counted["refused_share"] < MAX_REFUSED, seen
        assert counted["cost_share"] >= MIN_COST_SHARE, seen
        # cost binds, not requests: the partner never refused for lack of requests
        assert counted["buckets"]["requests-1s"]["refused"] == 0, seen

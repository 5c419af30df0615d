"""``bench/run``'s table shows each figure precisely enough to judge it by its goal:
a ratio of 1.24 against 1.25 must not read "1.2", an idle CPU of 0.014 not "0.0"."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import durable_phases as dp  # noqa: E402  (bench/ modules import each other as top-level modules)
import harness  # noqa: E402


@pytest.mark.parametrize(("value", "shown"), [
    (None, "-"), (1.24, "1.24"), (1.25, "1.25"), (0.84, "0.84"), (0.0143, "0.0143"),
    (91.5, "91.5"), (12287.9, "12,287.9"), (20000, "20,000"), (2.0, "2"),
])
def test_a_figure_is_shown_with_the_digits_its_goal_needs(value: object, shown: str) -> None:
    assert harness._shown(value) == shown


def test_a_ratio_just_under_its_goal_reads_as_such(capsys: pytest.CaptureFixture[str]) -> None:
    harness.print_table({
        "date": "2026-11-28T00:00:00+00:00", "machine": {"cores": 2, "ram_gb": 24},
        "postgres": "15", "loadavg_start": [0.1], "loadavg_end": [0.2], "details": {}, "notes": [],
        "durable_lifecycle_in_tick_over_graphile": 1.24,
        "idle_max_running_cpu_s_per_s": 0.0143})
    lines = capsys.readouterr().out.splitlines()
    ratio = next(line for line in lines if "in_tick lifecycle / graphile-worker" in line)
    idle = next(line for line in lines if "idle at the most running" in line)
    assert "1.24" in ratio
    assert ratio.endswith("NOT met")
    assert "0.0143" in idle
    assert idle.endswith(" met")


def _lifecycle(rates: list[float]) -> dict[str, object]:
    return {"all_completed_jobs_per_s": rates, "median_completed_jobs_per_s": sorted(rates)[1]}


def test_the_lifecycle_is_also_compared_run_by_run() -> None:
    """The machine's speed drifts over the minutes of a run: each hipq run is divided
    by the graphile-worker run beside it, at graphile-worker's best concurrency."""
    graphile = {"interleaved": True, "runs": [
        {"concurrency": 10, "jobs_per_s": 90.0, "median_jobs_per_s": 90.0,
         "all_jobs_per_s": [90.0, 90.0, 90.0]},
        {"concurrency": 50, "jobs_per_s": 100.0, "median_jobs_per_s": 100.0,
         "all_jobs_per_s": [100.0, 80.0, 120.0]}]}
    details = {"lifecycle-durable": {"python_batch": _lifecycle([110.0, 100.0, 150.0]),
                                     "python_in_tick_batch": _lifecycle([130.0, 96.0, 150.0])},
               "graphile": graphile}
    head = dp.summary(details)
    assert head["durable_lifecycle_over_graphile"] == 1.1  # the medians: 110 / 100
    assert head["durable_lifecycle_over_graphile_pairs"] == [1.1, 1.25, 1.25]
    assert head["durable_lifecycle_over_graphile_pair_median"] == 1.25
    assert head["durable_lifecycle_in_tick_over_graphile_pairs"] == [1.3, 1.2, 1.25]
    assert head["durable_lifecycle_in_tick_over_graphile_pair_median"] == 1.25


def test_no_pairs_without_interleaved_runs() -> None:
    """graphile-worker run in a phase of its own (not beside hipq's runs), or a run
    missing on one side: no pairs, rather than pairs of runs apart in time."""
    graphile = {"runs": [{"concurrency": 10, "jobs_per_s": 90.0, "median_jobs_per_s": 90.0,
                          "all_jobs_per_s": [90.0, 90.0, 90.0]}]}
    details = {"lifecycle-durable": {"python_batch": _lifecycle([110.0, 100.0, 150.0])},
               "graphile": graphile}
    assert dp.summary(details)["durable_lifecycle_over_graphile_pairs"] is None
    graphile["interleaved"] = True
    graphile["runs"][0]["all_jobs_per_s"] = [90.0, 90.0]
    assert dp.summary(details)["durable_lifecycle_over_graphile_pairs"] is None

"""The memory goals of the ``idle`` phase (issue 28): hipq's RSS with 100,000 running
jobs on one queue, and with 1,000 running spread over 10 queues (the shape of a small
deployment: what a daemon costs before it holds much).

The runs of ``details["idle"]`` are keyed by their running jobs (``"1000"``,
``"100000"``: one queue, ``--idle-running``) or ``"<queues>q_<running>"`` (the spread
run, ``--idle-queues`` / ``--idle-spread-running``)."""

from __future__ import annotations

from typing import Any

# run key -> (headline key of results.json, table label, goal in MB: RSS <= goal)
GOALS: dict[str, tuple[str, str, float]] = {
    "100000": ("idle_rss_mb_100k_running", "idle RSS, 100,000 running, 1 queue (MB)", 100.0),
    "10q_1000": ("idle_rss_mb_10q_1k_running", "idle RSS, 1,000 running, 10 queues (MB)", 60.0),
}
TARGETS: list[tuple[str, str, str, float | None]] = [
    (key, label, "<=", goal) for key, label, goal in GOALS.values()]


def spread_key(queues: int, running: int) -> str:
    return f"{queues}q_{running}"


def summary(idle: dict[str, Any]) -> dict[str, Any]:
    """The headline RSS of each goal's run (None when it did not run or failed)."""
    return {key: idle.get(run, {}).get("rss_mb") for run, (key, _, _) in GOALS.items()}


def rss_text(run_key: str, run: dict[str, Any]) -> str:
    """``RSS 57 MB (goal <= 60 MB: met)``, or without the goal for other runs."""
    rss = float(run["rss_mb"])
    goal = GOALS.get(run_key)
    if goal is None:
        return f"RSS {rss:.0f} MB"
    verdict = "met" if rss <= goal[2] else "NOT met"
    return f"RSS {rss:.1f} MB (goal <= {goal[2]:g} MB: {verdict})"


def label(run_key: str, run: dict[str, Any]) -> str:
    """``idle, 100,000 running`` or ``idle, 1,000 running / 10 queues``."""
    queues = int(run.get("queues", 1))
    where = f" / {queues} queues" if queues > 1 else ""
    return f"idle, {int(run['running']):>7,} running{where}"

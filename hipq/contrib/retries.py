"""Example retry plugins.

``retry: {plugin: "hipq.contrib.retries:StepBackoff", options: {steps: [5, 30, 300]}}``
"""

from __future__ import annotations

from datetime import timedelta

from hipq.plugins import GiveUp, Retry, RetryContext


class StepBackoff:
    """Retry after fixed steps (seconds), one per failed try; give up after the last.
    ``http_status`` errors marked ``detail: "410"`` give up at once."""

    def __init__(self, steps: list[float] | None = None) -> None:
        self.steps = list(steps or [5, 30, 300])

    def decide(self, ctx: RetryContext) -> Retry | GiveUp:
        if ctx.error.kind == "http_status" and ctx.error.detail == "410":
            return GiveUp("gone")
        index = ctx.job.attempt - 1
        if index >= len(self.steps):
            return GiveUp(f"no step after {len(self.steps)} tries")
        return Retry(at=ctx.now + timedelta(seconds=self.steps[index]))


def retry_with_note(ctx: RetryContext) -> Retry | GiveUp:
    """A function plugin: retry in 10 s and record the failure in the job's data."""
    notes = list(ctx.job.data.get("failures", []))
    notes.append(ctx.error.kind)
    return Retry(at=ctx.now + timedelta(seconds=10), data={**ctx.job.data, "failures": notes})

"""Misbehaving plugins, loaded by ``"tests.engine._plugins:Name"`` like a user's."""

from __future__ import annotations

from datetime import timedelta

from hipq.plugins import Retry, RetryContext, ThrottleContext, ThrottleResult


class ScribblingRetry:
    """Retries at once, after scribbling on the job copy it was handed (without
    returning new data): nothing of that may reach the database."""

    def decide(self, ctx: RetryContext) -> Retry:
        ctx.job.data["scribbled"] = True
        ctx.job.data.pop("keep", None)
        return Retry(at=ctx.now + timedelta(seconds=0))


class ScribblingThrottler:
    """Launches every candidate after scribbling on every snapshot it sees."""

    def select(self, ctx: ThrottleContext) -> ThrottleResult:
        for job in [*ctx.candidates, *ctx.running]:
            job.data["scribbled"] = True
            job.data.pop("keep", None)
        return ThrottleResult(launch=list(ctx.candidates))


class FlakyThrottler:
    """Raises on its first call, then launches everything."""

    def __init__(self) -> None:
        self.calls = 0

    def select(self, ctx: ThrottleContext) -> ThrottleResult:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("throttler bug")
        return ThrottleResult(launch=list(ctx.candidates))


class RaisingRetry:
    """A retry strategy with a bug: the built-in exponential backoff takes over."""

    def decide(self, ctx: RetryContext) -> Retry:
        raise RuntimeError("retry bug")


class RecordingThrottler:
    """Launches every candidate; notes the data of the running jobs it was shown."""

    seen: list[list[dict[str, object]]] = []

    def select(self, ctx: ThrottleContext) -> ThrottleResult:
        RecordingThrottler.seen.append([job.data for job in ctx.running])
        return ThrottleResult(launch=list(ctx.candidates))

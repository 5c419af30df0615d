"""Misbehaving plugins, loaded by ``"tests.engine._plugins:Name"`` like a user's."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from hipq.plugins import GiveUp, Retry, RetryContext, ThrottleContext, ThrottleResult


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




class MalformedRetry:
    """Answers what the plugin API does not allow (``odd`` names what): each must be
    taken as an error in the plugin, never reach the store."""

    def __init__(self, odd: str) -> None:
        self.odd = odd

    def decide(self, ctx: RetryContext) -> object:
        retry: dict[str, dict[str, Any]] = {
            "naive": {"at": datetime(2030, 1, 1)},  # taken as UTC: fine
            "text": {"at": "tomorrow"},
            "uuid_data": {"at": ctx.now, "data": {"u": uuid.uuid4()}},
            "list_data": {"at": ctx.now, "data": [1, 2]},
            "nan_data": {"at": ctx.now, "data": {"x": float("nan")}},
        }
        give_up: dict[str, Any] = {"reason_int": 123, "reason_nul": "a\x00b"}
        if self.odd in retry:
            return Retry(**retry[self.odd])
        if self.odd in give_up:
            return GiveUp(reason=give_up[self.odd])
        return "retry please"


class MalformedThrottler:
    """Launches every candidate but ``odd`` and says something the plugin API does
    not allow about it (``odd`` names what)."""

    def __init__(self, odd: str) -> None:
        self.odd = odd

    def select(self, ctx: ThrottleContext) -> ThrottleResult:
        rest = [j for j in ctx.candidates if j.id != "odd"]
        fields: dict[str, dict[str, Any]] = {
            "naive": {"reschedule": {"odd": datetime(2030, 1, 1)}},  # taken as UTC: fine
            "text": {"reschedule": {"odd": "tomorrow"}},
            "drop_set": {"drop": {"odd": {1, 2}}},
            "drop_nul": {"drop": {"odd": "a\x00b"}},
            "launch_ids": {"launch": [*rest, "odd"]},
            "launch_none": {"launch": None},
            "reschedule_none": {"reschedule": None},
            "held_number": {"held": {"odd": 5}},
            "generator": {"launch": (j for j in rest)},  # any iterable: fine
        }
        return ThrottleResult(**{"launch": rest, **fields[self.odd]})

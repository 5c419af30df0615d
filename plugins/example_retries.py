"""A retry plugin: ``retry: {plugin: "plugins.example_retries:TransientOnly",
options: {delay_seconds: 30}}``.

Retries only what time can fix: a timeout, a transport failure, a lost launch, or
an HTTP status of 5xx, 408 or 429 (after ``Retry-After`` when the partner gave
one). A downstream's own "failed" answer, any other 4xx, or a plugin error gives
up at once. ``max_attempts`` still bounds the tries (hipq checks it first).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from hipq.plugins import GiveUp, Retry, RetryContext

TRANSIENT_KINDS = frozenset({"timeout", "transport", "lost"})
TRANSIENT_STATUSES = frozenset({408, 429})


class TransientOnly:
    def __init__(self, delay_seconds: float = 30.0) -> None:
        if isinstance(delay_seconds, bool) or not isinstance(delay_seconds, int | float) \
                or not 0 <= delay_seconds <= 86_400:
            raise ValueError("delay_seconds must be a number from 0 to 86400")
        self.delay = timedelta(seconds=delay_seconds)

    def decide(self, ctx: RetryContext) -> Retry | GiveUp:
        error = ctx.error
        if error.kind in TRANSIENT_KINDS:
            return Retry(at=ctx.now + self.delay)
        status = (error.data or {}).get("status")
        if error.kind == "http_status" and isinstance(status, int) and (
                status >= 500 or status in TRANSIENT_STATUSES):
            return Retry(at=max(ctx.now + self.delay, _retry_after(ctx) or ctx.now))
        return GiveUp(f"{error.kind} is not transient")


def _retry_after(ctx: RetryContext) -> datetime | None:
    """The partner's ``Retry-After`` (seconds or an ISO time), if it gave one."""
    after = (ctx.error.data or {}).get("retry_after")
    if isinstance(after, int | float) and not isinstance(after, bool):
        return ctx.now + timedelta(seconds=after)
    if isinstance(after, str):
        try:
            return datetime.fromisoformat(after)
        except ValueError:
            return None
    return None

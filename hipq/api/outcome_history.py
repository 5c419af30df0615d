"""``GET /v1/outcomes``: the last hour of job outcomes per minute, so the dashboard's
charts have something to show the moment the page opens (docs/dashboard.md).

**State model.** :class:`OutcomeHistory` is a ring of :data:`KEPT_MINUTES` one-minute
buckets kept in this daemon's memory, each holding counts by ``(queue, outcome)``
(the outcomes of ``hipq_job_outcomes_total``: succeeded, failed, retried, expired,
cancelled, timeout, lost, throttled). It is fed by sampling this daemon's own
outcome counters (:class:`~hipq.metrics.Metrics`) every :data:`SAMPLE_SECONDS` and
at every read: what the counters grew by since the last sample is added to the
bucket of the minute of the sample. The hot path pays nothing; a sample costs one
walk over the counter's label sets (queues x outcomes).

**Who is authoritative.** The counters: the history is a view of them, never
written to the database. So, like the counters (docs/operations.md):

* a restart starts an empty history (``recorded_since`` says since when it was
  kept); nothing of it survives the process;
* with several daemons each one keeps what *it* did: the outcomes of the queues it
  owned at the time. A page served by one daemon shows that daemon's share; the
  history of the whole cluster is Prometheus's sum over the daemons.

**Failure modes.** A daemon without metrics (``ApiDeps.metrics`` None) answers an
empty history. Bucket placement is as exact as the sampling: an outcome lands in
the minute it was sampled in, at most :data:`SAMPLE_SECONDS` after it happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated

from aiohttp import web
from pydantic import AwareDatetime, Field

from hipq.api.deps import DEPS
from hipq.api.io import read_query, reply
from hipq.api.models import _In, _Out
from hipq.clock import Clock
from hipq.config import QUEUE_ID_PATTERN
from hipq.metrics import OUTCOMES, Metrics

log = logging.getLogger(__name__)

MINUTE = timedelta(minutes=1)
KEPT_MINUTES = 60  # the window served: the current minute and the 59 before it
SAMPLE_SECONDS = 5.0  # how often the counters are sampled between reads

Key = tuple[str, str]  # (queue, outcome)


@dataclass(slots=True)
class _Bucket:
    at: datetime  # the minute's start (UTC)
    counts: dict[Key, int] = field(default_factory=dict)


def minute_of(when: datetime) -> datetime:
    return when.replace(second=0, microsecond=0)


class OutcomeHistory:
    """The last :data:`KEPT_MINUTES` minutes of this daemon's outcome counters."""

    def __init__(self, metrics: Metrics | None, clock: Clock) -> None:
        self._metrics, self._clock = metrics, clock
        self._last: dict[Key, float] = {}
        self._buckets: deque[_Bucket] = deque(maxlen=KEPT_MINUTES)
        self.recorded_since: datetime | None = None

    def _totals(self) -> dict[Key, float]:
        if self._metrics is None:
            return {}
        return self._metrics.outcome_totals()

    def sample(self) -> None:
        """Add what the counters grew by since the last sample to this minute."""
        now = self._clock.now()
        if self._metrics is not None and self.recorded_since is None:
            self.recorded_since = now
        totals = self._totals()
        bucket = self._bucket(minute_of(now))
        for key, value in totals.items():
            grown = int(value - self._last.get(key, 0.0))
            if grown > 0:
                bucket.counts[key] = bucket.counts.get(key, 0) + grown
        self._last = totals

    def _bucket(self, at: datetime) -> _Bucket:
        if not self._buckets or self._buckets[-1].at < at:
            self._buckets.append(_Bucket(at=at))
        return self._buckets[-1]  # a clock set back: the newest bucket takes it

    def window(self, queue: str | None) -> tuple[datetime, list[dict[str, int]]]:
        """The window's first minute and, per minute (oldest first, every minute of
        the window), the counts by outcome: of ``queue``, or of every queue."""
        self.sample()
        newest = minute_of(self._clock.now())
        first = newest - MINUTE * (KEPT_MINUTES - 1)
        minutes: list[dict[str, int]] = [{} for _ in range(KEPT_MINUTES)]
        for bucket in self._buckets:
            index = int((bucket.at - first) / MINUTE)
            if 0 <= index < KEPT_MINUTES:
                _add(minutes[index], bucket.counts, queue)
        return first, minutes

    def totals_by_queue(self) -> dict[str, dict[str, int]]:
        """Each queue's counts by outcome over the window (read after :meth:`window`)."""
        first = minute_of(self._clock.now()) - MINUTE * (KEPT_MINUTES - 1)
        out: dict[str, dict[str, int]] = {}
        for bucket in self._buckets:
            if bucket.at >= first:
                for (queue, outcome), n in bucket.counts.items():
                    counts = out.setdefault(queue, {})
                    counts[outcome] = counts.get(outcome, 0) + n
        return out

    async def run(self) -> None:
        """Sample every :data:`SAMPLE_SECONDS` of real time until cancelled. Not the
        injected clock's sleep: a test's FakeClock moves forward on each sleep, so the
        sampling would run the daemon's time away (the clock only stamps the buckets)."""
        while True:
            self.sample()
            await asyncio.sleep(SAMPLE_SECONDS)  # noqa: TID251 (real-time polling)


def _add(into: dict[str, int], counts: Mapping[Key, int], queue: str | None) -> None:
    for (q, outcome), n in counts.items():
        if queue is None or q == queue:
            into[outcome] = into.get(outcome, 0) + n


OUTCOME_HISTORY = web.AppKey("hipq_outcome_history", OutcomeHistory)


def install(app: web.Application) -> None:
    """Keep the history for ``app`` (before it starts): the ring, read by the route,
    and its sampling task, which runs while the app does."""
    deps = app[DEPS]
    history = app[OUTCOME_HISTORY] = OutcomeHistory(deps.metrics, deps.service.clock)

    async def sampling(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(history.run(), name="hipq-outcome-history")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app.cleanup_ctx.append(sampling)


# -- the route ----------------------------------------------------------------------

_OUTCOMES_TEXT = ", ".join(OUTCOMES)


class OutcomesQuery(_In):
    name: Annotated[str, Field(min_length=1, max_length=100, pattern=QUEUE_ID_PATTERN)] | None = (
        Field(default=None, description="only this queue (default: every queue summed)"))


class OutcomeMinute(_Out):
    at: AwareDatetime = Field(description="the minute's start (UTC)")
    counts: dict[str, int] = Field(description=f"outcomes in that minute, by outcome "
                                   f"({_OUTCOMES_TEXT}); outcomes with none left out")


class OutcomesOut(_Out):
    """This daemon's outcomes over the last hour, per minute (kept in its memory:
    empty after a restart; with several daemons, this daemon's share)."""

    queue: str | None = Field(description="the queue asked for; null: every queue")
    bucket_seconds: int = Field(description="the length of one bucket: 60")
    since: AwareDatetime = Field(description="the first minute of the window")
    recorded_since: AwareDatetime | None = Field(
        description="when this daemon began keeping outcomes (its start); null: it keeps "
        "none (no metrics)")
    minutes: list[OutcomeMinute] = Field(
        description=f"every minute of the window, oldest first ({KEPT_MINUTES} items, the "
        "last one still going)")
    queues: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="each queue's outcomes over the whole window, by "
        "outcome (without name only)")


async def outcomes(request: web.Request) -> web.Response:
    query = read_query(request, OutcomesQuery)
    history = request.app[OUTCOME_HISTORY]
    first, minutes = history.window(query.name)
    return reply(OutcomesOut(
        queue=query.name, bucket_seconds=int(MINUTE.total_seconds()), since=first,
        recorded_since=history.recorded_since,
        minutes=[OutcomeMinute(at=first + MINUTE * i, counts=counts)
                 for i, counts in enumerate(minutes)],
        queues={} if query.name else history.totals_by_queue()))

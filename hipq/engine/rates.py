"""Rate limits as the downstream sees them: this daemon's own launches, counted
until one window after they were answered.

A claim records its launches in ``launch_events`` stamped with the tick's ``now``
(in the claim's transaction, so every daemon counts them at once). But a launch is
sent later (after the tick, or once a slot of the target or of the launcher is
free), and it reaches the downstream at some moment before its answer. So the
stamp of the claim alone can let a late launch and the next window's launches
arrive within one ``per_seconds``. The owner therefore also counts, from memory,
each of its launches that is still in flight or was answered inside the window,
whatever its claim time: a launch answered at ``a`` arrived at or before ``a``,
and a launch claimed at ``t`` arrives at or after ``t``; counting the first until
``a + per_seconds`` keeps any two arrivals that share a window within the limit.

State model: :class:`RateLog` holds, per rate-limited queue this daemon owns, its
launches of the current window and those in flight (group, claim stamp, answer
time or ``None``). Entries answered more than a window ago are dropped.

Handover and crashes: the releasing daemon writes its launches back with their
answer times (:meth:`RateLog.events`, ``launch_events_replace``) before it
releases the lease. A daemon that adopts a rate-limited queue stamps the surviving
events with the adoption time (``launch_events_restamp``): a dead daemon's launches
arrived before it died, hence before the adoption; this covers every launch that
left a dead daemon within a window of its claim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from hipq.engine.requests import Plan, call
from hipq.jobs import Job


@dataclass(slots=True)
class _Launch:
    group: str
    claimed_at: datetime
    answered_at: datetime | None = None


class RateLog:
    def __init__(self) -> None:
        self._queues: dict[str, dict[tuple[str, int], _Launch]] = {}

    def claimed(self, job: Job, group: str, at: datetime) -> None:
        """A launch of ``job`` counted against its queue's rate limit."""
        self._queues.setdefault(job.queue, {})[(job.id, job.attempt)] = _Launch(group, at)

    def answered(self, job: Job, now: Callable[[], datetime]) -> None:
        """The launch's send finished (accepted, an outcome, or failed) ``now()``
        (read only for a launch counted here: most queues have no rate limit)."""
        launches = self._queues.get(job.queue)
        if launches:
            launch = launches.get((job.id, job.attempt))
            if launch is not None and launch.answered_at is None:
                launch.answered_at = now()

    def extra(self, queue: str, since: datetime, now: datetime) -> dict[str, list[datetime]]:
        """Launches to count beside the stored events after ``since`` (a window
        back from ``now``): the ones claimed at or before ``since`` that are in flight
        or were answered after it, each as a launch at ``now``. Drops the entries
        that can no longer count."""
        launches = self._queues.get(queue)
        if not launches:
            return {}
        out: dict[str, list[datetime]] = {}
        for key, launch in list(launches.items()):
            answered = launch.answered_at
            if answered is not None and answered <= since:
                del launches[key]
            elif launch.claimed_at <= since:
                out.setdefault(launch.group, []).append(now)
        return out

    def events(self, queue: str) -> tuple[datetime, list[tuple[str, datetime]]] | None:
        """For a handover: the oldest claim stamp of the queue's launches and each
        launch as ``(group, answer time, else claim time)``; None if there are none."""
        launches = self._queues.get(queue)
        if not launches:
            return None
        oldest = min(launch.claimed_at for launch in launches.values())
        return oldest, [(launch.group, launch.answered_at or launch.claimed_at)
                        for launch in launches.values()]

    def queues(self) -> list[str]:
        return [queue for queue, launches in self._queues.items() if launches]

    def write_back(self, queue: str) -> Plan[None]:
        """Before a queue is released: its launches as the rate limit must count them
        (answer times, :meth:`events`), for the next owner; then forgotten here."""
        events = self.events(queue)
        if events is not None:
            yield call("launch_events_replace", queue=queue, since=events[0], events=events[1])
        self.drop_queue(queue)

    def drop_queue(self, queue: str) -> None:
        self._queues.pop(queue, None)

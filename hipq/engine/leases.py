"""Queue leases, the cluster's membership, and the adoption of running jobs.

State model. A lease row per queue (``leases``: queue, owner, expires_at) says which
daemon owns the queue, and a row per live daemon (``daemons``, with a heartbeat)
says who shares the queues; the database is authoritative. :attr:`Leases.held` is
this daemon's copy of the queues it owns and fetches for; :attr:`Leases.releasing`
the queues it still owns but is handing over (no fetch; released once their
in-flight launches are recorded and persisted: the end of a tick,
:meth:`hipq.engine.plan.TickPlan.finish`).

Fair spread. At each renewal (every third of ``lease_seconds``, on a timer of its
own so a long tick interval never lets a lease lapse; and at once when queues
appear or go away) a daemon heartbeats, reads the live set, and aims at
``ceil(queues / live daemons)`` leases: over its share, it hands the excess over;
under it, it takes free or expired leases up to its share. A daemon that joins
thus gets its share within two renewals after the others released theirs, well
inside ``2 x lease_seconds``.

Failure modes: a daemon that dies stops renewing; after ``lease_seconds`` another
daemon acquires the queue and adopts its running jobs (:func:`adopt`): confirmed
launches keep waiting for their response or deadline, unconfirmed ones fail with
``lost``. A daemon that finds it lost a lease drops that queue from its batch. A
database error in a renewal is logged; the next renewal tries again (the leases
stay valid until they expire).

The methods that touch the database are plans (:mod:`hipq.engine.requests`): each
returns an :class:`~hipq.engine.requests.Alone` request, so that the executor runs
one lease plan at a time (a renewal on the lease timer may come while a tick
refreshes them).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from hipq.engine.decide import outcome_lost
from hipq.engine.held import HeldTry
from hipq.engine.requests import Alone, Plan, call

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseChange:
    gained: list[str]
    lost: list[str]


MIN_LEASE_SECONDS = 1.0


def timing_warnings(*, interval_seconds: float, lease_seconds: float) -> list[str]:
    """What ``check-config`` says of ``reconcile.interval_seconds`` and
    ``reconcile.lease_seconds`` together (leases renew on their own timer, every
    third of ``lease_seconds``, whatever the interval)."""
    warnings = []
    if lease_seconds < MIN_LEASE_SECONDS:
        warnings.append(
            f"reconcile.lease_seconds is {lease_seconds:g}: leases renew every "
            f"{lease_seconds / 3:.2f}s, and a slow database or a pause of the process "
            "that long hands queues over for nothing (and fails unconfirmed launches "
            f"as lost); use {MIN_LEASE_SECONDS:g} or more")
    if interval_seconds >= lease_seconds:
        warnings.append(
            f"reconcile.interval_seconds ({interval_seconds:g}) is not shorter than "
            f"reconcile.lease_seconds ({lease_seconds:g}): a dead daemon's queues are "
            "taken over faster than a live one polls its own, and deadlines and retries "
            "are noticed only every interval; lower interval_seconds (wake-ups carry "
            "new work) or raise lease_seconds")
    return warnings


def fair_share(queues: int, daemons: int) -> int:
    """How many leases each live daemon aims at."""
    return math.ceil(queues / max(1, daemons))


class Leases:
    def __init__(self, *, owner: str, lease_seconds: float) -> None:
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.held: set[str] = set()
        self.releasing: set[str] = set()  # still ours, being handed over
        self.live: list[str] = [owner]  # the live daemons at the last heartbeat
        self.stopping = False  # a graceful stop: acquire nothing more
        self.force = False  # renew and rebalance at the next refresh (timer, NOTIFY)
        self._renewed_at: datetime | None = None
        self._seen: set[str] = set()
        self._lost: set[str] = set()  # found lost by a renewal, not yet reported

    @property
    def renew_every(self) -> timedelta:
        return timedelta(seconds=self.lease_seconds / 3)

    @property
    def owned(self) -> set[str]:
        return self.held | self.releasing

    def due(self, now: datetime) -> bool:
        return self._renewed_at is None or now - self._renewed_at >= self.renew_every

    def renew(self, now: datetime) -> Alone:
        """Heartbeat and renew what this daemon owns, nothing else: the timer's job,
        safe beside a tick (what it finds lost is reported by the next refresh)."""
        return Alone("leases", self._renew(now))

    def _renew(self, now: datetime) -> Plan[None]:
        self.live = yield call("daemon_heartbeat", owner=self.owner, now=now,
                               seconds=self.lease_seconds)
        if self.owned:
            kept = yield call("lease_acquire_many", queues=sorted(self.owned),
                              owner=self.owner, now=now, seconds=self.lease_seconds)
            self._lost |= self.owned - kept
            self.held &= kept
            self.releasing &= kept
        self._renewed_at = now

    def refresh(self, queues: Collection[str], now: datetime) -> Alone:
        """In a tick: renew when due, rebalance towards the fair share; answers what
        was gained and lost since the last call (a :class:`LeaseChange`)."""
        return Alone("leases", self._refresh(queues, now))

    def _refresh(self, queues: Collection[str], now: datetime) -> Plan[LeaseChange]:
        gained: set[str] = set()
        if self.force or self.due(now) or set(queues) != self._seen:
            self.force = False
            gained = yield from self._rebalance(set(queues), now)
        lost, self._lost = self._lost, set()
        lost -= gained
        for queue in sorted(lost):
            log.warning("lost the lease on queue %s", queue, extra={"action": "lease_lost"})
        return LeaseChange(gained=sorted(gained), lost=sorted(lost))

    def _rebalance(self, queues: set[str], now: datetime) -> Plan[set[str]]:
        self._seen = set(queues)
        gone = self.owned - queues  # deleted queues: let their leases go
        if gone:
            yield call("lease_release_many", queues=sorted(gone), owner=self.owner)
            self._lost |= gone
            self.held -= gone
            self.releasing -= gone
        yield from self._renew(now)
        share = fair_share(len(queues), len(self.live))
        if self.stopping:
            return set()
        if len(self.held) > share:
            excess = sorted(self.held)[share:]
            self.held -= set(excess)
            self.releasing |= set(excess)
            log.info("handing over %d queues (share %d of %d queues, %d daemons)",
                     len(excess), share, len(queues), len(self.live),
                     extra={"action": "handover_start"})
            return set()
        want = share - len(self.owned)
        if want <= 0:
            return set()
        leases = yield call("lease_list")
        free = [q for q in sorted(queues - self.owned)
                if q not in leases or leases[q][1] < now]
        if not free:
            return set()
        got: set[str] = yield call("lease_acquire_many", queues=free[:want],
                                   owner=self.owner, now=now, seconds=self.lease_seconds)
        self.held |= got
        return got

    def release(self, queues: Collection[str]) -> Alone:
        """The end of a handover: the queues are no longer ours."""
        return Alone("leases", self._release(queues))

    def _release(self, queues: Collection[str]) -> Plan[None]:
        yield call("lease_release_many", queues=sorted(queues), owner=self.owner)
        self.releasing -= set(queues)
        self.held -= set(queues)
        log.info("handed over queues %s", ", ".join(sorted(queues)),
                 extra={"action": "handover"})


ADOPT_PAGE = 500  # running jobs read and taken at a time by an adoption


def adopt(*, queue: str, owner: str, now: datetime,
          add: Callable[[HeldTry], None]) -> Plan[int]:
    """Take over the running jobs of a queue whose lease was just acquired: they
    become ours (one statement), then are read a page at a time by id, each page
    given to ``add`` before the next is read, so a takeover needs memory for a
    page, not for the whole running set. An unconfirmed launch ends as a ``lost``
    try. Returns how many were adopted."""
    if not (yield call("job_adopt_running", queue=queue, owner=owner, now=now)):
        return 0
    adopted = 0
    after: str | None = None
    while True:
        page = yield call("job_load_running", queue=queue, after_id=after, limit=ADOPT_PAGE)
        for job in page:
            entry = HeldTry(job=job, deadline=job.deadline)
            if not job.launch_confirmed:
                entry.outcome = outcome_lost()
            add(entry)
        adopted += len(page)
        if len(page) < ADOPT_PAGE:
            break
        after = page[-1].id
    log.info("adopted %d running jobs of queue %s", adopted, queue,
             extra={"action": "adopt", "queue": queue})
    return adopted

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

Units. Queues that name one declared partner are one *unit* (docs/throttling.md,
"Partners": their budget is exact only with one owner): the fair share counts
units, a daemon takes a unit whole (every queue of it free) and hands it over
whole. A unit split between daemons (a queue named the partner after its siblings
were leased elsewhere) goes to the owner of its first queue: another holder hands
its part over, and the engine launches nothing of a unit it does not hold whole
(:meth:`Leases.whole`). Every other queue is a unit of its own.

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
from collections.abc import Callable, Collection, Mapping
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
        self._units: dict[str, str] = {}  # queue -> its unit, for queues sharing one
        self._groups: dict[str, list[str]] = {}  # unit -> its queues, sorted

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

    def refresh(self, queues: Collection[str], now: datetime,
                units: Mapping[str, str] | None = None) -> Alone:
        """In a tick: renew when due, rebalance towards the fair share (``units``:
        queue -> its unit, for the queues that share one); answers what was gained and
        lost since the last call (a :class:`LeaseChange`)."""
        return Alone("leases", self._refresh(queues, now, units or {}))

    def whole(self, queue: str) -> bool:
        """Whether this daemon holds every queue of ``queue``'s unit (launches of a
        unit held in part wait: its budget is exact with one owner only)."""
        unit = self._units.get(queue)
        return unit is None or all(q in self.held for q in self._groups.get(unit, ()))

    def _refresh(self, queues: Collection[str], now: datetime,
                 units: Mapping[str, str]) -> Plan[LeaseChange]:
        gained: set[str] = set()
        if dict(units) != self._units:
            self._units = dict(units)
            self._groups = {}
            for queue in sorted(units):
                self._groups.setdefault(units[queue], []).append(queue)
            self.force = True
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
        groups: dict[str, list[str]] = {}
        for queue in sorted(queues):
            groups.setdefault(self._units.get(queue, queue), []).append(queue)
        share = fair_share(len(groups), len(self.live))
        if self.stopping:
            return set()
        mine = {u for u, members in groups.items() if any(q in self.held for q in members)}
        leases: dict[str, tuple[str, datetime]] | None = None
        if any(not all(q in self.owned for q in groups[u]) for u in mine):
            leases = yield call("lease_list")
            self._settle_split(groups, mine, leases, now)
        if len(mine) > share:
            excess = [q for u in sorted(mine)[share:] for q in groups[u] if q in self.held]
            self._hand_over(excess)
            log.info("handing over %d queues (share %d of %d units, %d daemons)",
                     len(excess), share, len(groups), len(self.live),
                     extra={"action": "handover_start"})
            return set()
        want = share - len(mine)
        if leases is None:
            if want <= 0 and all(all(q in self.owned for q in groups[u]) for u in mine):
                return set()
            leases = yield call("lease_list")
        wanted = self._wanted(groups, mine, leases, want, now)
        if not wanted:
            return set()
        got: set[str] = yield call("lease_acquire_many", queues=wanted,
                                   owner=self.owner, now=now, seconds=self.lease_seconds)
        self.held |= got
        return got

    def _settle_split(self, groups: Mapping[str, list[str]], mine: set[str],
                      leases: Mapping[str, tuple[str, datetime]], now: datetime) -> None:
        """Units held in part: the owner of a unit's first queue keeps it; this daemon
        hands its part of the others over (and no longer counts them as its own)."""
        for unit in sorted(mine):
            lead = groups[unit][0]
            if lead not in self.owned and lead in leases and leases[lead][1] >= now:
                self._hand_over([q for q in groups[unit] if q in self.held])
                mine.discard(unit)

    def _wanted(self, groups: Mapping[str, list[str]], mine: set[str],
                leases: Mapping[str, tuple[str, datetime]], want: int,
                now: datetime) -> list[str]:
        """The queues to acquire: the free ones of units held in part, then ``want``
        whole units all of whose queues are free."""

        def free(queue: str) -> bool:
            return queue not in leases or leases[queue][1] < now

        wanted = [q for u in sorted(mine) for q in groups[u] if q not in self.owned and free(q)]
        for unit, members in sorted(groups.items()):
            if want <= 0:
                break
            if unit not in mine and all(free(q) for q in members) \
                    and not any(q in self.owned for q in members):
                wanted.extend(members)
                want -= 1
        return wanted

    def _hand_over(self, queues: Collection[str]) -> None:
        self.held -= set(queues)
        self.releasing |= set(queues)

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

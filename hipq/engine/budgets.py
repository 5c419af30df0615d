"""Partners' budgets in the engine (docs/throttling.md, "Partners"): one budget for
every queue that names a partner.

State model: an *account* per partner (and per key of it, with ``by``): its
buckets (:class:`~hipq.partners.buckets.Window`, one per configured limit), the
weight its tries hold in flight, and the rate learned from refusals that said
nothing (:class:`~hipq.partners.learning.CubicRate`, paced by a
:class:`~hipq.partners.learning.Pacer`). A *reservation* per try launched through an
account: its weight and what it took from each bucket, kept until the try ends,
when the actual cost the response reports replaces the estimate
(:meth:`Budgets.ended`).

Step 2 (:func:`hipq.engine.selection.select_queue`) offers each queue's chosen
launches to :meth:`Budgets.admit` after the queue's own throttler: a launch goes
when its account has the concurrency, the learned pace and room in every bucket;
otherwise it waits (held reason ``partner``) and so does every later launch of its
account in this tick (an account is served in order). Everything here is O(the
launches and ends of the tick); buckets are never recomputed from history.

Kept in memory by the daemon that owns the partner's queues; what was learned is
written with the queues' state (:class:`~hipq.engine.partner_word.PartnerWord`).

Pure: no I/O library; times are given.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from hipq.jobs import Job
from hipq.partners import headers as partner_headers
from hipq.partners.buckets import Limit, Reported, Taken, Window, more_exact
from hipq.partners.learning import CubicRate, LaunchRate, Pacer
from hipq.paths import MISSING, lookup
from hipq.pause_scope import group_of
from hipq.spec import PartnerSpec, QueueSpec
from hipq.throttling import field_value

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_KEYS = 10_000  # accounts kept per partner with ``by``: the idle ones go first

AccountKey = tuple[str, str | None]  # (partner id, key value or None)
TryKey = tuple[str, str]  # (queue, job id): a job has one try in flight at most


@dataclass(slots=True)
class Account:
    """One partner's budget (or one key's of it)."""

    windows: list[Window]
    reported: dict[str, Reported] = field(default_factory=dict)  # by the partner's name
    in_flight: int = 0
    learned: CubicRate = field(default_factory=CubicRate)
    measured: LaunchRate = field(default_factory=LaunchRate)
    pacer: Pacer = field(default_factory=Pacer)
    accepted: int = 0  # launches admitted, in all
    refused: int = 0  # tries the partner refused (throttled), in all
    last_used: datetime | None = None


class Reservation(NamedTuple):
    """What one try took (a tuple: one is made per launch)."""

    account: AccountKey
    weight: int
    taken: Sequence[tuple[Window, Taken]]  # its cost in each cost bucket (to settle)


NOTHING_TAKEN: tuple[tuple[Window, Taken], ...] = ()


@dataclass(frozen=True, slots=True)
class Admission:
    """What :meth:`Budgets.admit` let go, and how many waited."""

    launch: list[str]
    held: int = 0


def usage_cost(value: Any) -> float | None:
    """The actual cost a response reports: ``{"usage": {"cost": n}}`` (a finite number
    >= 0), else None."""
    if not isinstance(value, Mapping):
        return None
    usage = value.get("usage")
    if not isinstance(usage, Mapping):
        return None
    cost = usage.get("cost")
    if isinstance(cost, bool) or not isinstance(cost, int | float):
        return None
    cost = float(cost)
    return cost if math.isfinite(cost) and cost >= 0 else None


class Budgets:
    def __init__(self, partners: Mapping[str, PartnerSpec] | None = None) -> None:
        self.partners: dict[str, PartnerSpec] = dict(partners or {})
        self._accounts: dict[AccountKey, Account] = {}
        self._reserved: dict[TryKey, Reservation] = {}
        self._keyed: dict[str, int] = {}  # partner -> its accounts with a key
        self._paced: dict[AccountKey, float] = {}  # held back: the cost of its first held
        self._queues: dict[str, str] = {}  # queue -> the declared partner it names
        self._served: dict[str, datetime] = {}  # queue -> when it last launched through one
        self._tally: dict[str, list[int]] = {}  # partner -> [admitted, refused], in all
        # a queue that names no declared partner is its own: an account of its own
        # once its answers reported a budget (most queues never get one)
        self._own: dict[str, PartnerSpec] = {}

    # -- what a queue's partner is -------------------------------------------------------

    def partner_of(self, spec: QueueSpec) -> PartnerSpec | None:
        """The declared partner the queue names, else the queue as its own partner
        once its answers reported a budget; None: nothing to count."""
        if spec.partner is not None:
            declared = self.partners.get(spec.partner)
            if declared is not None:
                return declared
        return self._own.get(spec.id)

    def declared(self, spec: QueueSpec) -> PartnerSpec | None:
        """The declared partner the queue names (None: it is its own partner, or it
        names one this daemon's settings do not declare)."""
        return None if spec.partner is None else self.partners.get(spec.partner)

    @staticmethod
    def key_of(partner: PartnerSpec, job: Job) -> str | None:
        """The account key of a job: its value at ``by`` in its bounded, exact form."""
        if partner.by is None:
            return None
        value = field_value(job.data, partner.by)
        return group_of("" if value is None else value)

    @staticmethod
    def cost_of(partner: PartnerSpec, job: Job) -> float:
        """A launch's estimated cost: the number at ``cost.estimate`` in its data (a
        finite number >= 0), else ``cost.default``."""
        field = partner.cost_field
        if field is not None:
            data = job.data
            value = data.get(field, MISSING) if "." not in field else lookup(data, field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                value = float(value)
                if math.isfinite(value) and value >= 0:
                    return value
        return partner.cost_default

    def account(self, partner: PartnerSpec, key: str | None) -> Account:
        found = self._accounts.get((partner.id, key))
        if found is None:
            if key is not None:
                keyed = self._keyed.get(partner.id, 0)
                if keyed >= MAX_KEYS:
                    keyed = self._prune(partner.id)
                self._keyed[partner.id] = keyed + 1
            found = self._accounts[(partner.id, key)] = Account(
                windows=[Window(Limit(unit=limit.unit, amount=limit.amount,  # type: ignore[arg-type]
                                      per_seconds=limit.per_seconds))
                         for limit in partner.limits])
        return found

    def accounts(self, partner_id: str) -> Iterable[tuple[str | None, Account]]:
        return ((key, acct) for (pid, key), acct in self._accounts.items() if pid == partner_id)

    def _prune(self, partner_id: str) -> int:
        """A tenth of the partner's keyed accounts go, the idle ones used longest ago
        (a scan once per thousand new keys, not per key); how many are left."""
        keys = [k for k in self._accounts if k[0] == partner_id and k[1] is not None]
        idle = [k for k in keys if self._accounts[k].in_flight == 0]
        idle.sort(key=lambda k: self._accounts[k].last_used or EPOCH)
        gone = idle[:max(len(keys) - MAX_KEYS + MAX_KEYS // 10, 0)]
        for k in gone:
            del self._accounts[k]
        return len(keys) - len(gone)

    # -- step 2: admission -----------------------------------------------------------------

    def admit(self, spec: QueueSpec, launch: Sequence[str], jobs: Mapping[str, Job],
              now: datetime) -> Admission:
        """The queue's chosen launches its partner's budget lets go now, in order;
        each is reserved (its weight, its cost in every bucket) until it ends."""
        partner = self.partner_of(spec)
        if partner is None:
            self._queues.pop(spec.id, None)
            return Admission(list(launch))
        self._queues[spec.id] = partner.id
        if not launch:
            return Admission([])
        if partner.by is None and self._admit_whole(partner, launch, jobs, now):
            self._served[spec.id] = now
            return Admission(list(launch))
        admitted: list[str] = []
        blocked: set[str | None] = set()
        counts: dict[str | None, int] = {}  # admitted per key: the measured rate
        held = 0
        accounts: dict[str | None, Account] = {}
        for job_id in launch:
            job = jobs[job_id]
            key = self.key_of(partner, job)
            if key in blocked:
                held += 1
                continue
            acct = accounts.get(key)
            if acct is None:
                acct = accounts[key] = self.account(partner, key)
            cost = self.cost_of(partner, job)
            if not self._fits(partner, acct, job.weight, cost, now):
                blocked.add(key)
                self._paced.setdefault((partner.id, key), cost)
                held += 1
                continue
            self._take(partner, acct, key, job, cost, now)
            counts[key] = counts.get(key, 0) + 1
            admitted.append(job_id)
        if admitted:
            self._served[spec.id] = now
            for key, count in counts.items():
                accounts[key].measured.launched(now, count)
        return Admission(admitted, held)

    def _admit_whole(self, partner: PartnerSpec, launch: Sequence[str],
                     jobs: Mapping[str, Job], now: datetime) -> bool:
        """The common case at one cost per launch: the whole batch fits the partner's
        buckets and concurrency at once (nothing learned or reported binds it), and is
        taken as one entry per bucket. False (nothing taken) when any part might not
        fit: then each launch is offered in turn."""
        acct = self.account(partner, None)
        if acct.reported or acct.learned.w_max is not None:
            return False
        chosen = [jobs[i] for i in launch]
        costly = any(w.limit.unit == "cost" for w in acct.windows)
        costs = [self.cost_of(partner, job) for job in chosen] if costly else []
        weight = sum(job.weight for job in chosen)
        if partner.concurrency is not None and acct.in_flight + weight > partner.concurrency:
            return False
        total = sum(costs)
        for window in acct.windows:
            amount = float(len(chosen)) if window.limit.unit == "requests" else total
            if window.used(now) + amount > window.limit.amount + 1e-9:
                return False
        entries: list[tuple[Window, Any]] = []
        for window in acct.windows:
            if window.limit.unit == "requests":
                window.add(float(len(chosen)), now)
            else:
                entries.append((window, window.add(total, now)))
        self._reserve_all(partner.id, chosen, costs, entries)
        acct.in_flight += weight
        acct.accepted += len(chosen)
        tally = self._tally.get(partner.id)
        if tally is None:
            tally = self._tally[partner.id] = [0, 0]
        tally[0] += len(chosen)
        acct.last_used = now
        acct.measured.launched(now, len(chosen))
        return True

    def _reserve_all(self, partner_id: str, chosen: Sequence[Job], costs: Sequence[float],
                     entries: Sequence[tuple[Window, Any]]) -> None:
        reserved, account = self._reserved, (partner_id, None)
        if entries:
            for n, job in enumerate(chosen):
                reserved[(job.queue, job.id)] = Reservation(
                    account, job.weight, [(w, Taken(entry, costs[n])) for w, entry in entries])
        else:  # requests only: nothing to settle
            for job in chosen:
                reserved[(job.queue, job.id)] = Reservation(account, job.weight, NOTHING_TAKEN)

    def order(self, queues: Iterable[str]) -> list[str]:
        """The order step 2 offers queues in: the queues of no declared partner first,
        by id; then the others, the one a partner served longest ago first, so that
        queues sharing a budget take turns (none starves behind a busier sibling)."""
        served = self._served
        return sorted(queues, key=lambda q: (q in served, served.get(q, EPOCH), q))

    @staticmethod
    def _fits(partner: PartnerSpec, acct: Account, weight: int, cost: float,
              now: datetime) -> bool:
        if partner.concurrency is not None and acct.in_flight + weight > partner.concurrency \
                and acct.in_flight > 0:
            return False
        for window in acct.windows:
            amount = 1.0 if window.limit.unit == "requests" else cost
            if window.room_at(amount, now) > now:
                return False
        for report in acct.reported.values():
            amount = 1.0 if report.bucket.unit == "requests" else cost
            if report.room_at(amount, now) > now:
                return False
        if acct.learned.w_max is None:
            return True
        rate = acct.learned.rate(now)
        return rate is None or acct.pacer.allow(rate, now, 1) > 0

    def _take(self, partner: PartnerSpec, acct: Account, key: str | None, job: Job,
              cost: float, now: datetime) -> None:
        taken = []
        for window in acct.windows:
            if window.limit.unit == "requests":
                window.add(1.0, now)  # a request is never settled
            else:
                taken.append((window, window.take(cost, now)))
        for report in acct.reported.values():
            report.take(1.0 if report.bucket.unit == "requests" else cost)
        acct.in_flight += job.weight
        acct.accepted += 1
        self._count(partner.id, 0)
        acct.last_used = now
        self._reserved[(job.queue, job.id)] = Reservation(
            account=(partner.id, key), weight=job.weight, taken=taken)

    def next_room(self, now: datetime) -> datetime | None:
        """When an account that held launches back may have room again (a tick is due
        then): the earliest of its buckets' and its pace's times."""
        times: list[datetime] = []
        own = {p.id: p for p in self._own.values()}
        for akey, cost in self._paced.items():
            acct = self._accounts.get(akey)
            partner = self.partners.get(akey[0]) or own.get(akey[0])
            if acct is None or partner is None:
                continue
            rate = acct.learned.rate(now)
            if rate is not None:
                times.append(acct.pacer.next_at(rate, now))
            for window in acct.windows:  # when the held launch's own cost fits
                at = window.room_at(1.0 if window.limit.unit == "requests" else cost, now)
                if at > now:
                    times.append(at)
            for report in acct.reported.values():
                at = report.room_at(1.0 if report.bucket.unit == "requests" else cost, now)
                if at > now:
                    times.append(at)
        self._paced.clear()
        return min(times) if times else None

    # -- step 3: ends ------------------------------------------------------------------------

    def ended(self, queue: str, job_id: str, reported: Any) -> None:
        """A try launched through an account ended: its weight is free again and the
        actual cost ``reported`` (a result or error data with ``usage``) replaces the
        estimate in every cost bucket."""
        reservation = self._reserved.pop((queue, job_id), None)
        if reservation is None:
            return
        acct = self._accounts.get(reservation.account)
        if acct is not None:
            acct.in_flight = max(acct.in_flight - reservation.weight, 0)
        if not reservation.taken:
            return
        actual = usage_cost(reported)
        if actual is None:
            return
        for window, taken in reservation.taken:
            if window.limit.unit == "cost":
                window.settle(taken, actual)

    def drop_queue(self, queue: str) -> None:
        """The queue is no longer ours: its reservations go (the next owner counts its
        tries as it adopts them); once none of its partner's queues is ours, the
        partner's accounts go too (a later owner of them restores what was saved)."""
        partner_id = self._queues.pop(queue, None)
        if partner_id is not None and partner_id not in self._queues.values():
            for akey in [k for k in self._accounts if k[0] == partner_id]:
                del self._accounts[akey]
            self._keyed.pop(partner_id, None)
        self._served.pop(queue, None)
        self._own.pop(queue, None)
        for tkey in [k for k in self._reserved if k[0] == queue]:
            reservation = self._reserved.pop(tkey)
            acct = self._accounts.get(reservation.account)
            if acct is not None:
                acct.in_flight = max(acct.in_flight - reservation.weight, 0)

    # -- the partner's word ------------------------------------------------------------------

    def refused(self, spec: QueueSpec, job: Job | None, launched_at: datetime | None,
                now: datetime) -> bool:
        """A refusal that gave no time, of a queue that names a partner: the partner's
        (or the key's) learned rate drops, once a round. False when the queue names no
        declared partner."""
        partner = self.declared(spec)
        if partner is None:
            return False
        key = None if job is None else self.key_of(partner, job)
        acct = self.account(partner, key)
        acct.refused += 1
        self._count(partner.id, 1)
        acct.learned.refused(now, launched_at=launched_at or now,
                             measured=acct.measured.per_second(now))
        return True

    def whole(self, partner_id: str) -> CubicRate | None:
        """What was learned of the whole partner (not of one key), if anything."""
        acct = self._accounts.get((partner_id, None))
        return None if acct is None or acct.learned.w_max is None else acct.learned

    def learned(self, partner_id: str, now: datetime) -> float | None:
        """The partner's learned rate (the whole partner's account), None if none."""
        acct = self._accounts.get((partner_id, None))
        return None if acct is None else acct.learned.rate(now)

    def seed(self, partner_id: str, learned: CubicRate) -> None:
        """What an earlier owner learned of the partner (stored with its queues)."""
        partner = self.partners.get(partner_id)
        if partner is None or learned.w_max is None:
            return
        acct = self.account(partner, None)
        if acct.learned.since is None or (learned.since is not None
                                          and learned.since > acct.learned.since):
            acct.learned = CubicRate(w_max=learned.w_max, since=learned.since)

    def reported(self, spec: QueueSpec, job: Job, headers: Iterable[tuple[str, str]],
                 now: datetime) -> None:
        """An answer's rate-limit headers: each bucket the partner reported replaces
        the one held where it leaves less room (or the held one has reset); a queue
        with no declared partner gets an account of its own for them."""
        report = partner_headers.read(headers, now,
                                      max_seconds=spec.backoff.max_partner_seconds)
        if not report.buckets:
            return
        partner = self.partner_of(spec)
        if partner is None:
            partner = self._own[spec.id] = PartnerSpec(id=f"queue {spec.id}")
        acct = self.account(partner, self.key_of(partner, job))
        for bucket in report.buckets:
            held = acct.reported.get(bucket.name)
            if more_exact(held, bucket, now):
                acct.reported[bucket.name] = Reported(bucket, now)

    def export(self, partner_id: str, now: datetime) -> dict[str, Any] | None:
        """What the partner's buckets hold, for the next owner (JSON-ready; None when
        nothing is held): per account, each window's :meth:`Window.export`."""
        out = []
        for key, acct in self.accounts(partner_id):
            windows = [w.export(now) for w in acct.windows]
            if any(windows):
                out.append({"key": key, "windows": windows})
        if not out:
            return None
        return {"saved_at": now.isoformat(), "accounts": out[:MAX_KEYS]}

    def restore(self, partner_id: str, saved: Any, now: datetime) -> None:
        """An earlier owner's :meth:`export`: the ages count from when it was saved
        (what was launched since, by a daemon that died, is not known)."""
        partner = self.partners.get(partner_id)
        if partner is None or not isinstance(saved, dict):
            return
        try:
            saved_at = datetime.fromisoformat(saved["saved_at"])
            for entry in saved["accounts"]:
                acct = self.account(partner, entry["key"])
                for window, entries in zip(acct.windows, entry["windows"], strict=False):
                    shift = max((now - saved_at).total_seconds(), 0.0)
                    window.restore([(float(a) + shift, float(m)) for a, m in entries], now)
        except (KeyError, TypeError, ValueError):
            return  # written by another version: start afresh

    def heard(self, spec: QueueSpec, job: Job | None) -> None:
        """A refusal with a time (a pause), counted for the partner's figures."""
        partner = self.declared(spec)
        if partner is not None:
            key = None if job is None else self.key_of(partner, job)
            self.account(partner, key).refused += 1
            self._count(partner.id, 1)

    def _count(self, partner_id: str, which: int) -> None:
        tally = self._tally.get(partner_id)
        if tally is None:
            tally = self._tally[partner_id] = [0, 0]
        tally[which] += 1

    def tally(self, partner_id: str) -> tuple[int, int]:
        """Launches the partner's accounts admitted and tries it refused, in all (every
        key together; kept when idle keys are forgotten): O(1)."""
        admitted, refused = self._tally.get(partner_id, (0, 0))
        return admitted, refused

    def in_flight(self, partner_id: str) -> int:
        """The weight in flight through the partner, every key together."""
        return sum(acct.in_flight for _, acct in self.accounts(partner_id))

    def snapshot(self, partner_id: str, now: datetime, *, keys: int = 10) -> dict[str, Any]:
        """The partner as its owner sees it at ``now`` (JSON-ready): each bucket of the
        whole partner (or, with ``by``, of its busiest ``keys`` keys), the weight in
        flight, the learned rate, launches admitted and refusals in all."""
        partner = self.partners[partner_id]
        accounts = list(self.accounts(partner_id))
        whole = [acct for key, acct in accounts if key is None]

        def described(acct: Account) -> dict[str, Any]:
            rate = acct.learned.rate(now)
            return {
                "in_flight": acct.in_flight,
                "learned_rate": None if rate is None else round(rate, 3),
                "accepted_total": acct.accepted, "refused_total": acct.refused,
                "buckets": [{"unit": w.limit.unit, "limit": w.limit.amount,
                             "per_seconds": w.limit.per_seconds,
                             "used": round(w.used(now), 3),
                             "room_at": w.room_at(1.0 if w.limit.unit == "requests"
                                                  else partner.cost_default, now),
                             "source": "configured"} for w in acct.windows]
                + [{"unit": r.bucket.unit, "name": name, "limit": r.bucket.limit,
                    "per_seconds": r.bucket.window_seconds,
                    "remaining": round(max(r.room(now), 0.0), 3)
                    if not r.expired(now) else None,
                    "room_at": r.room_at(1.0, now), "resets_at": r.bucket.reset_at,
                    "source": "partner"} for name, r in acct.reported.items()]}

        busiest = sorted(((key, acct) for key, acct in accounts if key is not None),
                         key=lambda pair: (-pair[1].in_flight, -pair[1].accepted,
                                           pair[0] or ""))[:keys]
        return {"id": partner_id, "concurrency": partner.concurrency, "by": partner.by,
                "whole": described(whole[0]) if whole else None,
                "keys": [{"key": key, **described(acct)} for key, acct in busiest],
                "key_count": sum(1 for key, _ in accounts if key is not None)}

    def leads(self) -> dict[str, str]:
        """Each declared partner step 2 saw, with its first queue (where its buckets are
        kept for the next owner)."""
        out: dict[str, str] = {}
        for queue, partner_id in sorted(self._queues.items()):
            out.setdefault(partner_id, queue)
        return out

    def fresh(self, partner_id: str) -> bool:
        """Whether nothing of the partner is held here yet (a restore may fill it)."""
        return not any(True for _ in self.accounts(partner_id))

    def siblings(self, spec: QueueSpec) -> list[str]:
        """The other queues naming the same declared partner, as step 2 last saw them."""
        partner = self.declared(spec)
        if partner is None:
            return []
        return sorted(q for q, p in self._queues.items() if p == partner.id and q != spec.id)

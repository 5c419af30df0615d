"""The current batch: this daemon's in-memory view of the running jobs of the
queues it holds, and the tick's counters.

The database is authoritative; the batch is a cache changed only after the
database said so. One :class:`Entry` per running job, keyed by (queue, id); an
entry whose ``outcome`` is set has ended in memory and waits for step 3 to persist
it; a ``dirty`` one without an outcome was extended by a heartbeat. An entry that
waits through a tick lets its job go (see :class:`Entry`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload

from hipq.frozen import quick_init
from hipq.jobs import GENERATED_KEY_PREFIX, Job, JobError, JobState, generated_key
from hipq.store.records import Change, InboxOutcome
from hipq.throttling import RunningUsage, field_value


@quick_init
@dataclass(frozen=True, slots=True)
class Outcome:
    """How a try ended, as known in memory before it is persisted."""

    status: JobState  # SUCCEEDED, FAILED or CANCELLED
    result: Any = None
    error: JobError | None = None
    response: Any = None


# Entry.own_key of a try whose key is hipq's own: compared by identity (built at run
# time, so no string read from anywhere is this object)
_MADE = "".join(["~", "made by hipq"])


class Entry:
    """One try of the batch.

    The fields a tick reads are kept here; ``job`` is the job as claimed or
    adopted (with its data). Once the try has waited through a tick the batch lets
    the job go (a waiting try then costs a few hundred bytes), unless its queue
    keeps jobs (a plugin throttler reads ``ctx.running``); what needs the rest (a
    retry strategy, a new quota field) reads the job back (:meth:`Batch.attach`).
    """

    __slots__ = ("attempt", "critical", "deadline", "dirty", "id", "inbox_ids", "job",
                 "launched_at", "ordering_key", "outcome", "own_key", "queue", "timeout_seconds",
                 "token", "value", "weight")

    def __init__(self, job: Job, deadline: datetime | None, outcome: Outcome | None = None,
                 inbox_ids: Iterable[int] = ()) -> None:
        self.queue = job.queue
        self.id = job.id
        self.attempt = job.attempt
        self.token = job.token
        key = job.correlation_key
        # hipq's own key (~token.attempt) is made again when asked, not kept
        made = key is not None and key == generated_key(job.token, job.attempt)
        self.own_key = _MADE if made else key
        self.launched_at = job.launched_at
        self.deadline = deadline
        self.timeout_seconds = job.timeout_seconds
        self.weight = job.weight
        self.critical = job.critical
        self.ordering_key = job.ordering_key
        self.value: str | None = None  # the quota field's value (kept by the batch)
        self.job: Job | None = job
        self.outcome = outcome
        self.inbox_ids: tuple[int, ...] = tuple(inbox_ids)  # responses applied in memory
        self.dirty = False  # ended or extended since last persisted (step 3 persists it)

    @property
    def correlation_key(self) -> str | None:
        key = self.own_key
        return generated_key(self.token, self.attempt) if key is _MADE else key

    @property
    def fixed_key(self) -> bool:
        """A producer's correlation key (hipq's own keys are one a try)."""
        key = self.own_key
        return key is not None and key is not _MADE and not key.startswith(GENERATED_KEY_PREFIX)

    def __repr__(self) -> str:
        return (f"Entry({self.queue!r}, {self.id!r}, attempt={self.attempt}, "
                f"deadline={self.deadline!r}, outcome={self.outcome!r})")


COMPACT_SLACK = 1024  # stale deadline items tolerated beyond twice the live entries


class Batch(Mapping[tuple[str, str], Entry]):
    """The running entries, indexed so a tick costs O(what changed), not O(running):
    per queue by id, by correlation key; deadlines in buckets ordered by a heap of
    the distinct ones; the entries that ended or were extended apart; the
    weight, ordering keys and quota values each queue's live entries hold.

    Read it as a mapping by (queue, id); change it only through its methods, which
    keep the indexes in step.
    """

    def __init__(self) -> None:
        self._queues: dict[str, dict[str, Entry]] = {}
        self._size = 0
        self._by_key: dict[str, Entry] = {}  # producers' keys
        self._by_token: dict[str, Entry] = {}  # hipq's own keys, by the job's token
        self._weights: dict[tuple[str, bool], int] = {}  # (queue, critical) -> weight
        # per queue, over live entries: ordering key -> entries; and, for a queue with
        # quotas, the quota field's path and its value -> weight of normal entries
        self._keys: dict[str, dict[str, int]] = {}
        self._fields: dict[str, str] = {}
        self._values: dict[str, dict[str | None, int]] = {}
        self._full: set[str] = set()  # queues whose entries keep their jobs
        # entries added or extended since the last overdue(): bucketed (and let go of
        # their jobs) there, so the many tries that end within their first tick never
        # touch the deadlines nor lose their job
        self._fresh: list[Entry] = []
        self._loose: list[Entry] = []  # jobs read back for a moment: let go next tick
        self._due: dict[datetime, tuple[datetime, list[Entry]]] = {}  # some stale
        self._deadlines: list[datetime] = []  # heap of the keys of _due
        self._due_items = 0
        # marked entries by id() (an entry whose flag was cleared since is skipped)
        self._dirty: dict[int, Entry] = {}

    def __getitem__(self, key: tuple[str, str]) -> Entry:
        return self._queues[key[0]][key[1]]

    def get(self, key: tuple[str, str], default: Any = None) -> Any:
        ids = self._queues.get(key[0])
        return default if ids is None else ids.get(key[1], default)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        ids = self._queues.get(key[0])
        return ids is not None and key[1] in ids

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for queue, ids in self._queues.items():
            for job_id in ids:
                yield (queue, job_id)

    def __len__(self) -> int:
        return self._size

    def entries(self, queue: str) -> Collection[Entry]:
        """The queue's entries (the batch's own view: read it before it changes)."""
        return self._queues.get(queue, {}).values()

    # -- changes ------------------------------------------------------------------

    def add(self, entry: Entry, *, keep_job: bool = True) -> None:
        """A job claimed or adopted (an adopted one may have ended already). A
        waiting entry keeps its job until the next :meth:`overdue`, or not at all
        with ``keep_job=False`` (unless its queue keeps jobs)."""
        queue = entry.queue
        ids = self._queues.get(queue)
        if ids is None:
            ids = self._queues[queue] = {}
        elif entry.id in ids:
            self.remove_many(((queue, entry.id),))
        ids[entry.id] = entry
        self._size += 1
        own = entry.own_key
        if own is _MADE:
            self._by_token[entry.token] = entry
        elif own:
            self._by_key[own] = entry
        if entry.outcome is None:
            slot = (queue, entry.critical)
            self._weights[slot] = self._weights.get(slot, 0) + entry.weight
            path = self._fields.get(queue)
            if path is not None:
                if not entry.critical and entry.job is not None:
                    entry.value = field_value(entry.job.data, path)
                self._count(entry, 1)
            elif entry.ordering_key is not None:
                self._count(entry, 1)
            if not keep_job and queue not in self._full:
                entry.job = None
            self._fresh.append(entry)
        else:
            self._mark(entry)

    def end(self, entry: Entry, outcome: Outcome) -> None:
        """The try ended in memory; step 3 persists it."""
        if entry.outcome is None:
            self._weights[(entry.queue, entry.critical)] -= entry.weight
            if entry.ordering_key is not None or entry.queue in self._fields:
                self._count(entry, -1)
        entry.outcome = outcome
        entry.dirty = True
        self._dirty[id(entry)] = entry

    def extend(self, entry: Entry, deadline: datetime, inbox_id: int) -> None:
        """A heartbeat moved the deadline; step 3 persists it."""
        entry.deadline = deadline
        entry.inbox_ids += (inbox_id,)
        self._mark(entry)
        self._fresh.append(entry)

    def settle(self, key: tuple[str, str], deadline: datetime | None) -> None:
        """An extension was persisted: the entry waits on, with its new deadline."""
        entry = self.get(key)
        if entry is None:
            return
        entry.inbox_ids = ()
        if entry.job is not None:
            entry.job = entry.job.evolve(deadline=deadline)
        if entry.outcome is None:
            entry.dirty = False

    def remove(self, key: tuple[str, str]) -> None:
        self.remove_many((key,))

    def remove_many(self, keys: Sequence[tuple[str, str]]) -> None:
        """The entries leave the batch (step 3's persisted changes: one call a tick)."""
        queues, by_key, by_token, weights = (self._queues, self._by_key, self._by_token,
                                             self._weights)
        for queue, job_id in keys:
            ids = queues.get(queue)
            entry = None if ids is None else ids.pop(job_id, None)
            if entry is None:
                continue
            self._size -= 1
            own = entry.own_key
            if own is _MADE:
                if by_token.get(entry.token) is entry:
                    del by_token[entry.token]
            elif own and by_key.get(own) is entry:
                del by_key[own]
            if entry.outcome is None:
                weights[(queue, entry.critical)] -= entry.weight
                if entry.ordering_key is not None or queue in self._fields:
                    self._count(entry, -1)
            entry.dirty = False

    def drop_queue(self, queue: str) -> None:
        """The queue's lease was lost: its entries are another daemon's now."""
        self.remove_many([(queue, job_id) for job_id in self._queues.get(queue, {})])

    def keep_jobs(self, queue: str, keep: bool) -> None:
        """Whether the queue's entries keep their jobs (``running()`` needs them)."""
        if keep:
            self._full.add(queue)
        elif queue in self._full:
            self._full.discard(queue)
            self._loose.extend(self.entries(queue))

    def wants_jobs(self, queue: str, field_path: str | None) -> list[str]:
        """Ids of the queue's live entries whose jobs :meth:`usage` or
        :meth:`running` would need and that were let go: read them back and
        :meth:`attach` them first."""
        if queue in self._full or (field_path is not None
                                   and self._fields.get(queue) != field_path):
            return [e.id for e in self.entries(queue) if e.job is None and e.outcome is None]
        return []

    def attach(self, queue: str, jobs: Iterable[Job]) -> None:
        """Jobs read back for entries that let theirs go (a job at another attempt,
        or no longer in the batch, is ignored); let go again at the next tick
        unless the queue keeps jobs."""
        ids = self._queues.get(queue, {})
        keep = queue in self._full
        for job in jobs:
            entry = ids.get(job.id)
            if entry is not None and entry.job is None and entry.attempt == job.attempt:
                entry.job = job
                if not keep:
                    self._loose.append(entry)

    # -- reads --------------------------------------------------------------------

    def by_key(self, correlation_key: str) -> Entry | None:
        """The entry whose try has this key (hipq's own keys: by token and attempt)."""
        entry = self._by_key.get(correlation_key)
        if entry is None and correlation_key.startswith(GENERATED_KEY_PREFIX):
            token, dot, attempt = correlation_key[1:].rpartition(".")
            entry = self._by_token.get(token)
            if entry is not None and (not dot or str(entry.attempt) != attempt):
                return None
        return entry

    def usage(self, queue: str, field_path: str | None) -> RunningUsage:
        """What the queue's live entries hold, from the kept counts (the values by
        ``field_path`` are counted afresh when the path is new for the queue: an
        entry whose job was let go and not read back counts as no value). The sets
        and mappings are the batch's own: read them before it changes."""
        if field_path is None:
            if self._fields.pop(queue, None) is not None:
                self._values.pop(queue, None)
        elif self._fields.get(queue) != field_path:
            self._fields[queue] = field_path
            values: dict[str | None, int] = {}
            for entry in self.entries(queue):
                if entry.outcome is None and not entry.critical:
                    job = entry.job
                    value = entry.value = (None if job is None
                                           else field_value(job.data, field_path))
                    values[value] = values.get(value, 0) + entry.weight
            self._values[queue] = values
        keys = self._keys.get(queue)
        return RunningUsage(normal_weight=self._weights.get((queue, False), 0),
                            critical_weight=self._weights.get((queue, True), 0),
                            ordering_keys=keys.keys() if keys else frozenset(),
                            field_path=field_path,
                            field_weights=self._values.get(queue, {}))

    def _count(self, entry: Entry, sign: int) -> None:
        """Keep the ordering-key and quota-field counts of a live entry."""
        key = entry.ordering_key
        queue = entry.queue
        if key is not None:
            counts = self._keys.setdefault(queue, {})
            n = counts.get(key, 0) + sign
            if n > 0:
                counts[key] = n
            else:
                counts.pop(key, None)
        if not entry.critical and queue in self._fields:
            values = self._values.setdefault(queue, {})
            value = entry.value
            weight = values.get(value, 0) + sign * entry.weight
            if weight > 0:
                values[value] = weight
            else:
                values.pop(value, None)

    def running(self, queue: str) -> list[Job]:
        """The queue's jobs that still hold capacity (no outcome yet). Only for a
        queue that keeps its jobs, or after :meth:`attach`: see :meth:`wants_jobs`."""
        jobs = []
        for entry in self.entries(queue):
            if entry.outcome is None:
                if entry.job is None:
                    raise LookupError(f"job {entry.id!r} of queue {queue!r} was let go: "
                                      f"read it back (Batch.wants_jobs) first")
                jobs.append(entry.job)
        return jobs

    def running_weight(self, queue: str, *, critical: bool) -> int:
        return self._weights.get((queue, critical), 0)

    def changed(self) -> list[Entry]:
        """Entries that ended or were extended since they were last persisted."""
        live = [entry for entry in self._dirty.values() if entry.dirty]
        self._dirty = {id(entry): entry for entry in live}  # persisted or gone: off
        return live

    def _mark(self, entry: Entry) -> None:
        entry.dirty = True
        self._dirty[id(entry)] = entry

    def _current(self, entry: Entry) -> bool:
        ids = self._queues.get(entry.queue)
        return ids is not None and ids.get(entry.id) is entry

    def overdue(self, now: datetime) -> list[Entry]:
        """Live entries whose deadline is at or before ``now`` (each once). Called
        once a tick: the entries that still wait since the last call are bucketed
        by deadline and let go of their jobs here."""
        self._settle_fresh()
        out: list[Entry] = []
        seen: set[int] = set()  # an entry extended twice to one deadline is there twice
        heap, due = self._deadlines, self._due
        while heap and heap[0] <= now:
            deadline = heapq.heappop(heap)
            _, bucket = due.pop(deadline)
            self._due_items -= len(bucket)
            for entry in bucket:
                if (entry.outcome is None and entry.deadline == deadline
                        and id(entry) not in seen and self._current(entry)):
                    seen.add(id(entry))
                    out.append(entry)
        return out

    def _settle_fresh(self) -> None:
        """Bucket the deadlines of the entries added or extended since the last call
        that still wait, and let go of their jobs (and of those read back for a
        moment); one object for equal names, stamps and timeouts."""
        loose, self._loose = self._loose, []
        for entry in loose:
            if entry.queue not in self._full:
                entry.job = None
        if not self._fresh:
            return
        fresh, self._fresh = self._fresh, []
        full = self._full
        shared: dict[Any, Any] = {}
        for entry in fresh:
            if entry.outcome is not None or not self._current(entry):
                continue
            if entry.queue not in full:
                entry.job = None
            entry.queue = shared.setdefault(entry.queue, entry.queue)
            if entry.launched_at is not None:
                entry.launched_at = shared.setdefault(entry.launched_at, entry.launched_at)
            entry.timeout_seconds = shared.setdefault(entry.timeout_seconds,
                                                      entry.timeout_seconds)
            if entry.deadline is not None:
                self._bucket(entry, entry.deadline)
        if self._due_items > 2 * self._size + COMPACT_SLACK:
            self._rebucket()

    def _bucket(self, entry: Entry, deadline: datetime) -> None:
        slot = self._due.get(deadline)
        if slot is None:
            self._due[deadline] = slot = (deadline, [])
            heapq.heappush(self._deadlines, deadline)
        entry.deadline = slot[0]  # one object a deadline
        slot[1].append(entry)
        self._due_items += 1

    def _rebucket(self) -> None:
        """Drop the buckets' stale items (entries gone or moved: amortised O(1) an
        item, since jobs end long before their deadlines and each left one behind)."""
        due: dict[datetime, tuple[datetime, list[Entry]]] = {}
        items = 0
        for ids in self._queues.values():
            for entry in ids.values():
                deadline = entry.deadline
                if deadline is not None and entry.outcome is None:
                    slot = due.get(deadline)
                    if slot is None:
                        due[deadline] = slot = (deadline, [])
                    slot[1].append(entry)
                    items += 1
        self._due, self._due_items = due, items
        self._deadlines = list(due)
        heapq.heapify(self._deadlines)


class LazyJobs(Sequence[Job]):
    """A list of jobs made on first use (a throttler's ``ctx.running``: the
    built-in one never reads it, so a tick does not list every running job)."""

    __slots__ = ("_jobs", "_make")

    def __init__(self, make: Callable[[], list[Job]]) -> None:
        self._make: Callable[[], list[Job]] | None = make
        self._jobs: list[Job] = []

    def _list(self) -> list[Job]:
        if self._make is not None:
            self._jobs, self._make = self._make(), None
        return self._jobs

    @overload
    def __getitem__(self, index: int) -> Job: ...
    @overload
    def __getitem__(self, index: slice) -> list[Job]: ...
    def __getitem__(self, index: int | slice) -> Job | list[Job]:
        return self._list()[index]

    def __len__(self) -> int:
        return len(self._list())

    def __iter__(self) -> Iterator[Job]:
        return iter(self._list())

    def __repr__(self) -> str:
        return repr(self._list())


@dataclass(frozen=True, slots=True)
class ReconcileResult:
    """What one tick did (every field a count)."""

    fetched: int = 0
    launched: int = 0
    rescheduled: int = 0
    dropped: int = 0
    expired: int = 0
    retried: int = 0
    finished: int = 0
    timed_out: int = 0
    responses_applied: int = 0
    adopted: int = 0
    throttler_errors: int = 0
    # for metrics (hipq.metrics) and failure logs, by reference: no per-job work here
    launched_jobs: Sequence[Job] = ()
    ended: Sequence[Change] = ()
    expired_by_queue: Mapping[str, int] = field(default_factory=dict)
    responses_by_outcome: Mapping[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return any(getattr(self, name) for name in self.__dataclass_fields__)


@dataclass(slots=True)
class Counters:
    values: dict[str, int] = field(default_factory=dict)
    launched_jobs: Sequence[Job] = ()
    ended: Sequence[Change] = ()
    expired_by_queue: dict[str, int] = field(default_factory=dict)
    responses_by_outcome: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, n: int = 1) -> None:
        if n:
            self.values[name] = self.values.get(name, 0) + n

    def expired(self, queue: str, n: int) -> None:
        self.add("expired", n)
        if n:
            self.expired_by_queue[queue] = self.expired_by_queue.get(queue, 0) + n

    def responses(self, marks: Sequence[tuple[int, InboxOutcome]]) -> None:
        for _, outcome in marks:
            self.responses_by_outcome[outcome] = self.responses_by_outcome.get(outcome, 0) + 1

    def result(self) -> ReconcileResult:
        return ReconcileResult(**self.values, launched_jobs=self.launched_jobs,
                               ended=self.ended, expired_by_queue=self.expired_by_queue,
                               responses_by_outcome=self.responses_by_outcome)

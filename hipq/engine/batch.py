"""The current batch: this daemon's in-memory view of the running jobs of the
queues it holds, and the tick's counters.

The database is authoritative; the batch is a cache changed only after the
database said so. One :class:`Entry` per running job, keyed by (queue, id); an
entry whose ``outcome`` is set has ended in memory and waits for step 3 to persist
it; ``extended`` says a heartbeat moved its deadline.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload

from hipq.frozen import quick_init
from hipq.jobs import Job, JobError, JobState
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


@dataclass(slots=True)
class Entry:
    job: Job
    deadline: datetime | None
    outcome: Outcome | None = None
    inbox_ids: list[int] = field(default_factory=list)
    extended: bool = False
    dirty: bool = False  # changed since last persisted (step 3 persists it)
    listed: bool = False  # in the batch's list of changed entries


COMPACT_SLACK = 1024  # stale deadline items tolerated beyond twice the live entries


class Batch(Mapping[tuple[str, str], Entry]):
    """The running entries, indexed so a tick costs O(what changed), not O(running):
    by (queue, id), by correlation key, per queue; deadlines in a heap; the entries
    that ended or were extended in a set; the weight each queue's live entries use.

    Read it as a mapping; change it only through its methods, which keep the
    indexes in step.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Entry] = {}
        self._by_key: dict[str, Entry] = {}
        self._queues: dict[str, dict[str, Entry]] = {}
        self._weights: dict[tuple[str, bool], int] = {}  # (queue, critical) -> weight
        # per queue, over live entries: ordering key -> entries; and, for a queue with
        # quotas, the quota field's path and its value -> weight of normal entries
        self._keys: dict[str, dict[str, int]] = {}
        self._fields: dict[str, str] = {}
        self._values: dict[str, dict[str | None, int]] = {}
        self._deadlines: list[tuple[datetime, int, tuple[str, str], int]] = []
        self._pushed = 0
        # live entries with a deadline not yet in the heap: pushed by overdue(), so
        # the many tries that end within their first tick never touch the heap
        self._unheaped: list[Entry] = []
        self._dirty: list[Entry] = []  # (an entry whose flag was cleared is skipped)
        # the dict's own get, not a Python method: called once per launched job
        self.get = self._entries.get  # type: ignore[method-assign,assignment]

    def __getitem__(self, key: tuple[str, str]) -> Entry:
        return self._entries[key]

    def get(self, key: tuple[str, str], default: Any = None) -> Any:
        return self._entries.get(key, default)  # (shadowed per instance: see __init__)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    # -- changes ------------------------------------------------------------------

    def add(self, entry: Entry) -> None:
        """A job claimed or adopted (an adopted one may have ended already)."""
        job = entry.job
        key = (job.queue, job.id)
        if key in self._entries:
            self.remove(key)
        self._entries[key] = entry
        ids = self._queues.get(job.queue)
        if ids is None:
            ids = self._queues[job.queue] = {}
        ids[job.id] = entry
        if job.correlation_key:
            self._by_key[job.correlation_key] = entry
        if entry.outcome is None:
            slot = (job.queue, job.critical)
            self._weights[slot] = self._weights.get(slot, 0) + job.weight
            if job.ordering_key is not None or job.queue in self._fields:
                self._count(job, 1)
            if entry.deadline is not None:
                self._unheaped.append(entry)
        else:
            self._mark(entry)

    def end(self, entry: Entry, outcome: Outcome) -> None:
        """The try ended in memory; step 3 persists it."""
        job = entry.job
        if entry.outcome is None:
            slot = (job.queue, job.critical)
            self._weights[slot] -= job.weight
            if job.ordering_key is not None or job.queue in self._fields:
                self._count(job, -1)
        entry.outcome = outcome
        entry.dirty = True
        if not entry.listed:
            entry.listed = True
            self._dirty.append(entry)

    def extend(self, entry: Entry, deadline: datetime, inbox_id: int) -> None:
        """A heartbeat moved the deadline; step 3 persists it."""
        entry.deadline = deadline
        entry.extended = True
        entry.inbox_ids.append(inbox_id)
        self._mark(entry)
        self._unheaped.append(entry)

    def settle(self, key: tuple[str, str], deadline: datetime | None) -> None:
        """An extension was persisted: the entry waits on, with its new deadline."""
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.extended = False
        entry.inbox_ids.clear()
        entry.job = entry.job.evolve(deadline=deadline)
        if entry.outcome is None:
            entry.dirty = False

    def remove(self, key: tuple[str, str]) -> None:
        self.remove_many((key,))

    def remove_many(self, keys: Sequence[tuple[str, str]]) -> None:
        """The entries leave the batch (step 3's persisted changes: one call a tick)."""
        entries, queues, by_key = self._entries, self._queues, self._by_key
        for key in keys:
            entry = entries.pop(key, None)
            if entry is None:
                continue
            job = entry.job
            del queues[job.queue][job.id]
            correlation_key = job.correlation_key
            if correlation_key and by_key.get(correlation_key) is entry:
                del by_key[correlation_key]
            if entry.outcome is None:
                self._weights[(job.queue, job.critical)] -= job.weight
                if job.ordering_key is not None or job.queue in self._fields:
                    self._count(job, -1)
            entry.dirty = False

    def drop_queue(self, queue: str) -> None:
        """The queue's lease was lost: its entries are another daemon's now."""
        for job_id in list(self._queues.get(queue, {})):
            self.remove((queue, job_id))

    # -- reads --------------------------------------------------------------------

    def by_key(self, correlation_key: str) -> Entry | None:
        return self._by_key.get(correlation_key)

    def has_key(self, correlation_key: str) -> bool:
        return correlation_key in self._by_key

    def usage(self, queue: str, field_path: str | None) -> RunningUsage:
        """What the queue's live entries hold, from the kept counts (the values by
        ``field_path`` are counted afresh when the path is new for the queue). The
        sets and mappings are the batch's own: read them before it changes."""
        if field_path is None:
            if self._fields.pop(queue, None) is not None:
                self._values.pop(queue, None)
        elif self._fields.get(queue) != field_path:
            self._fields[queue] = field_path
            values: dict[str | None, int] = {}
            for entry in self._queues.get(queue, {}).values():
                job = entry.job
                if entry.outcome is None and not job.critical:
                    value = field_value(job.data, field_path)
                    values[value] = values.get(value, 0) + job.weight
            self._values[queue] = values
        keys = self._keys.get(queue)
        return RunningUsage(normal_weight=self._weights.get((queue, False), 0),
                            critical_weight=self._weights.get((queue, True), 0),
                            ordering_keys=keys.keys() if keys else frozenset(),
                            field_path=field_path,
                            field_weights=self._values.get(queue, {}))

    def _count(self, job: Job, sign: int) -> None:
        """Keep the ordering-key and quota-field counts of a live entry's job."""
        key = job.ordering_key
        if key is not None:
            counts = self._keys.setdefault(job.queue, {})
            n = counts.get(key, 0) + sign
            if n > 0:
                counts[key] = n
            else:
                counts.pop(key, None)
        path = self._fields.get(job.queue)
        if path is not None and not job.critical:
            values = self._values.setdefault(job.queue, {})
            value = field_value(job.data, path)
            weight = values.get(value, 0) + sign * job.weight
            if weight > 0:
                values[value] = weight
            else:
                values.pop(value, None)

    def running(self, queue: str) -> list[Job]:
        """The queue's jobs that still hold capacity (no outcome yet)."""
        return [e.job for e in self._queues.get(queue, {}).values() if e.outcome is None]

    def running_weight(self, queue: str, *, critical: bool) -> int:
        return self._weights.get((queue, critical), 0)

    def changed(self) -> list[Entry]:
        """Entries that ended or were extended since they were last persisted."""
        live: list[Entry] = []
        for entry in self._dirty:
            if entry.dirty:
                live.append(entry)
            else:  # persisted or gone since: off the list
                entry.listed = False
        self._dirty = live
        return list(live)

    def _mark(self, entry: Entry) -> None:
        entry.dirty = True
        if not entry.listed:
            entry.listed = True
            self._dirty.append(entry)

    def overdue(self, now: datetime) -> list[Entry]:
        """Live entries whose deadline is at or before ``now`` (each once)."""
        out: list[Entry] = []
        seen: set[int] = set()  # an entry extended twice to one deadline has two items
        self._heap_unheaped()
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            deadline, _, key, attempt = heapq.heappop(heap)
            entry = self._entries.get(key)
            if (entry is not None and entry.outcome is None and entry.job.attempt == attempt
                    and entry.deadline == deadline and id(entry) not in seen):
                seen.add(id(entry))
                out.append(entry)
        return out

    def _heap_unheaped(self) -> None:
        """Push the deadlines of the entries added or extended since the last call
        that still wait (one item per entry and deadline; stale ones are skipped)."""
        if not self._unheaped:
            return
        fresh, self._unheaped = self._unheaped, []
        entries, heap, push = self._entries, self._deadlines, heapq.heappush
        for entry in fresh:
            job = entry.job
            key = (job.queue, job.id)
            if entry.outcome is None and entry.deadline is not None and entries.get(key) is entry:
                self._pushed += 1
                push(heap, (entry.deadline, self._pushed, key, job.attempt))
        if len(heap) > 2 * len(entries) + COMPACT_SLACK:
            self._compact()

    def _compact(self) -> None:
        """Drop the heap's items of entries gone or moved (amortised O(1) a push:
        jobs end long before their deadlines, and each left an item behind)."""
        self._deadlines = [(e.deadline, n, k, e.job.attempt)
                           for n, (k, e) in enumerate(self._entries.items())
                           if e.deadline is not None and e.outcome is None]
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

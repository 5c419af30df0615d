"""The current batch: the tries this daemon holds, of the queues it holds a lease on
(docs/internals.md, "The batch").

The database is authoritative; the batch is a cache changed only after the
database said so. The data model is one :class:`~hipq.engine.held.HeldTry` per
held try, by (queue, id). Everything else here is an index derived from those
records and private, kept in step by the methods that change the batch:

* :class:`_Keys`: tries by correlation key (a producer's key as given; hipq's own
  keys by the job's token, the key made again from it);
* :class:`_Holdings`: what each queue's waiting tries hold (weight, normal and
  critical; tries per ordering key; weight per value of the quota field), so a
  tick reads a queue's usage without listing its tries;
* :class:`_Deadlines`: waiting tries bucketed by deadline, ordered by a heap of
  the distinct deadlines, so a tick finds the overdue ones without a scan.

What a tick asks of the batch, by name: :meth:`Batch.add` (claimed or adopted),
:meth:`~Batch.end`, :meth:`~Batch.extend`, :meth:`~Batch.settle` (an extension
persisted), :meth:`~Batch.remove_many` (persisted ends leave),
:meth:`~Batch.drop_queue` (a lease lost), :meth:`~Batch.by_key`,
:meth:`~Batch.usage`, :meth:`~Batch.running`, :meth:`~Batch.changed` (what step
3 persists) and :meth:`~Batch.overdue` (what timed out). Which tries keep their
jobs, and reading let-go jobs back, is :mod:`hipq.engine.jobs_on_demand`'s.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, overload

from hipq import heap
from hipq.engine.held import HeldTry, Outcome, token_number
from hipq.jobs import GENERATED_KEY_PREFIX, Job
from hipq.throttling import RunningUsage, field_value

COMPACT_SLACK = 1024  # stale deadline items tolerated beyond twice the live tries
# tries added and removed between two returns of freed memory to the system
# (hipq.heap.release: a few ms on a large heap, so after this much change only)
RELEASE_TURNOVER = 50_000
# held tries from which a waiting try keeps its token as a number (48 bytes instead of
# 96), from when it is added or settles to wait; below, only an adopted one does (its
# job let go at once: Batch.add), and nothing is spent on the others
COMPACT_TOKENS_FROM = 10_000


class _Keys:
    """Tries by correlation key. Holds only tries whose key can match a response.

    hipq's own keys are found by the job's token: a fresh try's as a string
    (``by_token``), a waiting try's as the number it keeps (``by_number``, see
    :meth:`compact`). A dict keeps its table when entries leave, so ``by_token`` is
    made again once most of what it held has moved on (after an adoption...).
    Tokens are made numbers only while the batch holds :data:`COMPACT_TOKENS_FROM`
    tries or more, or as tries are adopted: a smaller batch saves little, and its
    claimed tries pay nothing."""

    __slots__ = ("by_key", "by_number", "by_token", "left")

    def __init__(self) -> None:
        self.by_key: dict[str, HeldTry] = {}  # keys as given (producers', templates')
        self.by_token: dict[str, HeldTry] = {}  # hipq's own keys, by the job's token
        self.by_number: dict[int, HeldTry] = {}  # the same, once the token is a number
        self.left = 0  # entries removed from by_token since it was last made

    def add(self, held: HeldTry) -> None:
        if held.own_key:
            token = held.token_key
            if isinstance(token, str):
                self.by_token[token] = held
            else:
                self.by_number[token] = held
        elif held.given_key:
            self.by_key[held.given_key] = held

    def remove(self, held: HeldTry) -> None:
        if held.own_key:
            token = held.token_key
            if isinstance(token, str):
                if self.by_token.get(token) is held:
                    self._leave(token)
            elif self.by_number.get(token) is held:
                del self.by_number[token]
        elif held.given_key and self.by_key.get(held.given_key) is held:
            del self.by_key[held.given_key]

    def compact(self, held: HeldTry) -> None:
        """The try waits: its token is kept as a number from now on, and found so."""
        token = held.token_key
        if not isinstance(token, str):
            return
        held.compact_token()
        number = held.token_key
        if isinstance(number, int) and held.own_key and self.by_token.get(token) is held:
            self._leave(token)
            self.by_number[number] = held

    def find(self, correlation_key: str) -> HeldTry | None:
        """The try with this key (hipq's own: by token, then the attempt checked)."""
        held = self.by_key.get(correlation_key)
        if held is None and correlation_key.startswith(GENERATED_KEY_PREFIX):
            token, dot, attempt = correlation_key[1:].rpartition(".")
            held = self.by_token.get(token)
            if (held is None and self.by_number
                    and (number := token_number(token)) is not None):
                held = self.by_number.get(number)
            if held is not None and (not dot or str(held.attempt) != attempt):
                return None
        return held

    def _leave(self, token: str) -> None:
        del self.by_token[token]
        self.left += 1
        if self.left > 2 * len(self.by_token) + COMPACT_SLACK:  # amortised O(1)
            self.by_token, self.left = dict(self.by_token), 0


class _Holdings:
    """What each queue's waiting tries hold. A try counts from :meth:`hold` to
    :meth:`release` (its end or its leaving, whichever comes first)."""

    __slots__ = ("fields", "keys", "values", "weights")

    def __init__(self) -> None:
        self.weights: dict[tuple[str, bool], int] = {}  # (queue, critical) -> weight
        self.keys: dict[str, dict[str, int]] = {}  # queue -> ordering key -> tries
        self.fields: dict[str, str] = {}  # queue -> the quota field counted by value
        self.values: dict[str, dict[str | None, int]] = {}  # queue -> value -> weight

    def hold(self, held: HeldTry) -> None:
        slot = (held.queue, held.critical)
        self.weights[slot] = self.weights.get(slot, 0) + held.weight
        path = self.fields.get(held.queue)
        if path is not None:
            if not held.critical and held.job is not None:
                held.value = field_value(held.job.data, path)
            self._count(held, 1)
        elif held.ordering_key is not None:
            self._count(held, 1)

    def release(self, held: HeldTry) -> None:
        self.weights[(held.queue, held.critical)] -= held.weight
        if held.ordering_key is not None or held.queue in self.fields:
            self._count(held, -1)

    def usage(self, queue: str, field_path: str | None,
              waiting: Callable[[], Iterable[HeldTry]]) -> RunningUsage:
        """The queue's usage; the weights by ``field_path`` are counted afresh over
        ``waiting()`` when the path is new for the queue (a try whose job was let go
        counts as no value)."""
        if field_path is None:
            if self.fields.pop(queue, None) is not None:
                self.values.pop(queue, None)
        elif self.fields.get(queue) != field_path:
            self.fields[queue] = field_path
            values: dict[str | None, int] = {}
            for held in waiting():
                if not held.critical:
                    job = held.job
                    value = held.value = None if job is None else field_value(job.data,
                                                                                field_path)
                    values[value] = values.get(value, 0) + held.weight
            self.values[queue] = values
        keys = self.keys.get(queue)
        return RunningUsage(normal_weight=self.weights.get((queue, False), 0),
                            critical_weight=self.weights.get((queue, True), 0),
                            ordering_keys=keys.keys() if keys else frozenset(),
                            field_path=field_path, field_weights=self.values.get(queue, {}))

    def _count(self, held: HeldTry, sign: int) -> None:
        queue, key = held.queue, held.ordering_key
        if key is not None:
            counts = self.keys.setdefault(queue, {})
            n = counts.get(key, 0) + sign
            if n > 0:
                counts[key] = n
            else:
                counts.pop(key, None)
        if not held.critical and queue in self.fields:
            values = self.values.setdefault(queue, {})
            weight = values.get(held.value, 0) + sign * held.weight
            if weight > 0:
                values[held.value] = weight
            else:
                values.pop(held.value, None)


class _Deadlines:
    """Waiting tries in one bucket per distinct deadline, the deadlines on a heap.
    A bucket may keep tries that ended or moved (skipped when it comes due, dropped
    by :meth:`compact`)."""

    __slots__ = ("buckets", "heap", "items")

    def __init__(self) -> None:
        self.buckets: dict[datetime, tuple[datetime, list[HeldTry]]] = {}
        self.heap: list[datetime] = []
        self.items = 0

    def add(self, held: HeldTry, deadline: datetime) -> None:
        slot = self.buckets.get(deadline)
        if slot is None:
            self.buckets[deadline] = slot = (deadline, [])
            heapq.heappush(self.heap, deadline)
        held.deadline = slot[0]  # one object a deadline
        slot[1].append(held)
        self.items += 1

    def due(self, now: datetime, current: Callable[[HeldTry], bool]) -> list[HeldTry]:
        """Tries still waiting on a deadline at or before ``now`` (each once)."""
        out: list[HeldTry] = []
        seen: set[int] = set()  # a try extended twice to one deadline is there twice
        heap, buckets = self.heap, self.buckets
        while heap and heap[0] <= now:
            deadline = heapq.heappop(heap)
            _, bucket = buckets.pop(deadline)
            self.items -= len(bucket)
            for held in bucket:
                if (held.outcome is None and held.deadline == deadline
                        and id(held) not in seen and current(held)):
                    seen.add(id(held))
                    out.append(held)
        return out

    def compact(self, tries: Iterable[HeldTry]) -> None:
        """Rebuild from the live ``tries`` (amortised O(1) an item: jobs end long
        before their deadlines and each left one item behind)."""
        self.buckets, self.heap, self.items = {}, [], 0
        for held in tries:
            if held.deadline is not None and held.outcome is None:
                self.add(held, held.deadline)


class Batch(Mapping[tuple[str, str], HeldTry]):
    """The held tries, by (queue, id), with their private indexes (see the module
    docstring). Read it as a mapping; change it only through its methods."""

    def __init__(self) -> None:
        self._queues: dict[str, dict[str, HeldTry]] = {}  # the records
        self._size = 0
        self._keys = _Keys()
        self._holdings = _Holdings()
        self._deadlines = _Deadlines()
        self._changed: dict[int, HeldTry] = {}  # marked dirty, by id() (some cleared since)
        # tries added or extended since the last overdue(): bucketed there, and let go
        # of their jobs, so the many tries that end within their first tick never
        # touch the deadlines nor lose their job
        self._fresh: list[HeldTry] = []
        self._loose: list[HeldTry] = []  # jobs read back for a moment: let go next tick
        self._keeping: set[str] = set()  # queues whose tries keep their jobs
        # one object for equal queue names, stamps and timeouts of the tries added
        # since the last overdue() (see _share)
        self._shared: dict[Any, Any] = {}
        self._turnover = 0  # tries added and removed since memory was last released

    # -- the mapping ---------------------------------------------------------------

    def __getitem__(self, key: tuple[str, str]) -> HeldTry:
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

    def entries(self, queue: str) -> Collection[HeldTry]:
        """The queue's tries (the batch's own view: read it before it changes)."""
        return self._queues.get(queue, {}).values()

    # -- changes ---------------------------------------------------------------------

    def add(self, held: HeldTry, *, keep_job: bool = True) -> None:
        """A try claimed (step 4) or adopted (an adopted one may have ended already).
        A waiting try keeps its job until the next :meth:`overdue`, or not at all
        with ``keep_job=False`` (unless its queue keeps jobs)."""
        queue = held.queue
        ids = self._queues.get(queue)
        if ids is None:
            ids = self._queues[queue] = {}
        elif held.id in ids:
            self.remove_many(((queue, held.id),))
        self._share(held)
        ids[held.id] = held
        self._size += 1
        self._turnover += 1
        waiting = held.outcome is None
        if waiting and (not keep_job or self._size >= COMPACT_TOKENS_FROM):
            # as it is added: an adopted try's token string then dies with its row
            held.compact_token()
        self._keys.add(held)
        if waiting:
            self._holdings.hold(held)
            if not keep_job and queue not in self._keeping:
                held.job = None
            self._fresh.append(held)
        else:
            self._mark(held)

    def end(self, held: HeldTry, outcome: Outcome) -> None:
        """The try ended in memory; step 3 persists it."""
        if held.outcome is None:
            self._holdings.release(held)
        held.outcome = outcome
        self._mark(held)

    def extend(self, held: HeldTry, deadline: datetime, inbox_id: int) -> None:
        """A heartbeat moved the deadline; step 3 persists it."""
        held.deadline = deadline
        held.inbox_ids += (inbox_id,)
        self._mark(held)
        self._fresh.append(held)

    def settle(self, key: tuple[str, str], deadline: datetime | None) -> None:
        """An extension was persisted: the try waits on, with its new deadline."""
        held = self.get(key)
        if held is None:
            return
        held.inbox_ids = ()
        if held.job is not None:
            held.job = held.job.evolve(deadline=deadline)
        if held.outcome is None:
            held.dirty = False

    def remove(self, key: tuple[str, str]) -> None:
        self.remove_many((key,))

    def remove_many(self, keys: Sequence[tuple[str, str]]) -> None:
        """The tries leave the batch (step 3's persisted changes: one call a tick)."""
        queues, index, holdings = self._queues, self._keys, self._holdings
        for queue, job_id in keys:
            ids = queues.get(queue)
            held = None if ids is None else ids.pop(job_id, None)
            if held is None:
                continue
            self._size -= 1
            self._turnover += 1
            index.remove(held)
            if held.outcome is None:
                holdings.release(held)
            held.dirty = False

    def drop_queue(self, queue: str) -> None:
        """The queue's lease was lost: its tries are another daemon's now."""
        self.remove_many([(queue, job_id) for job_id in self._queues.get(queue, {})])

    # -- which tries keep their jobs (used by hipq.engine.jobs_on_demand) -----------

    def keep_jobs(self, queue: str, keep: bool) -> None:
        """Whether the queue's tries keep their jobs (:meth:`running` needs them)."""
        if keep:
            self._keeping.add(queue)
        elif queue in self._keeping:
            self._keeping.discard(queue)
            self._loose.extend(self.entries(queue))

    def wants_jobs(self, queue: str, field_path: str | None) -> list[str]:
        """Ids of the queue's waiting tries whose jobs :meth:`usage` or
        :meth:`running` would need and that were let go."""
        if queue in self._keeping or (field_path is not None
                                      and self._holdings.fields.get(queue) != field_path):
            return [h.id for h in self.entries(queue) if h.job is None and h.outcome is None]
        return []

    def attach(self, queue: str, jobs: Iterable[Job]) -> None:
        """Jobs read back for tries that let theirs go (a job at another attempt, or
        no longer held, is ignored); let go again at the next tick unless the queue
        keeps jobs."""
        ids = self._queues.get(queue, {})
        keep = queue in self._keeping
        for job in jobs:
            held = ids.get(job.id)
            if held is not None and held.job is None and held.attempt == job.attempt:
                held.job = job
                if not keep:
                    self._loose.append(held)

    # -- reads ------------------------------------------------------------------------

    def by_key(self, correlation_key: str) -> HeldTry | None:
        """The try that holds this correlation key."""
        return self._keys.find(correlation_key)

    def usage(self, queue: str, field_path: str | None) -> RunningUsage:
        """What the queue's waiting tries hold (the sets and mappings are the batch's
        own: read them before it changes)."""
        return self._holdings.usage(
            queue, field_path, lambda: [h for h in self.entries(queue) if h.outcome is None])

    def running(self, queue: str) -> list[Job]:
        """The queue's jobs that still hold capacity. Only for a queue that keeps its
        jobs, or after :meth:`attach`: see :meth:`wants_jobs`."""
        jobs = []
        for held in self.entries(queue):
            if held.outcome is None:
                if held.job is None:
                    raise LookupError(f"job {held.id!r} of queue {queue!r} was let go: "
                                      f"read it back (Batch.wants_jobs) first")
                jobs.append(held.job)
        return jobs

    def running_weight(self, queue: str, *, critical: bool) -> int:
        return self._holdings.weights.get((queue, critical), 0)

    def changed(self) -> list[HeldTry]:
        """Tries that ended or were extended since they were last persisted."""
        live = [held for held in self._changed.values() if held.dirty]
        self._changed = {id(held): held for held in live}  # persisted or gone: off
        return live

    def overdue(self, now: datetime) -> list[HeldTry]:
        """Waiting tries whose deadline is at or before ``now`` (each once). Called
        once a tick: the tries that still wait since the last call are bucketed by
        deadline and let go of their jobs here."""
        self._settle_fresh()
        return self._deadlines.due(now, self._current)

    # -- inside ------------------------------------------------------------------------

    def _mark(self, held: HeldTry) -> None:
        held.dirty = True
        self._changed[id(held)] = held

    def _current(self, held: HeldTry) -> bool:
        ids = self._queues.get(held.queue)
        return ids is not None and ids.get(held.id) is held

    def _share(self, held: HeldTry) -> None:
        """One object for equal queue names, launch stamps, deadlines and timeouts,
        from the moment a try is added: the copies its row made die with the row.
        (An adoption reads 100,000 rows a page at a time; copies kept until the next
        tick would leave their memory scattered between the records that stay, and
        the process would keep it.)"""
        shared = self._shared
        held.queue = shared.setdefault(held.queue, held.queue)
        if held.launched_at is not None:
            held.launched_at = shared.setdefault(held.launched_at, held.launched_at)
        if held.deadline is not None:
            held.deadline = shared.setdefault(held.deadline, held.deadline)
        held.timeout_seconds = shared.setdefault(held.timeout_seconds, held.timeout_seconds)

    def _settle_fresh(self) -> None:
        """Bucket the deadlines of the tries added or extended since the last call
        that still wait, and let go of their jobs (and of those read back for a
        moment); after much change (an adoption...), return freed memory."""
        self._shared = {}
        loose, self._loose = self._loose, []
        for held in loose:
            if held.queue not in self._keeping:
                held.job = None
        if self._fresh:
            fresh, self._fresh = self._fresh, []
            self._settle(fresh)
        if self._turnover >= RELEASE_TURNOVER:
            self._turnover = 0
            heap.release()

    def _settle(self, fresh: list[HeldTry]) -> None:
        """Bucket the deadlines of ``fresh`` tries that still wait; let go of their jobs
        and, in a large batch, keep their tokens as numbers (see :class:`_Keys`)."""
        keeping, deadlines = self._keeping, self._deadlines
        compact = self._keys.compact if self._size >= COMPACT_TOKENS_FROM else None
        for held in fresh:
            if held.outcome is not None or not self._current(held):
                continue
            if held.queue not in keeping:
                held.job = None
            if compact is not None:
                compact(held)
            if held.deadline is not None:
                deadlines.add(held, held.deadline)
        if deadlines.items > 2 * self._size + COMPACT_SLACK:
            deadlines.compact(h for ids in self._queues.values() for h in ids.values())


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

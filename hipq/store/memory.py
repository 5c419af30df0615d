"""A store kept in memory: the third driver of :class:`~hipq.store.base.Store`, a
test double, opened by ``open_store("memory://")``. Not for production: nothing
survives the process, and no other process sees it.

It passes the drivers' conformance suite (``tests/contract``), so the engine's and
the throttler's tests run on it in milliseconds, and the databases are proven once,
by that suite (Procrastinate's ``InMemoryConnector``, APScheduler's
``MemoryDataStore``; docs/development.md).

Its tables are dicts (:mod:`hipq.store.memory_tables`); the statements are Python
over them, split as the SQL drivers split theirs: jobs (:mod:`.memory_jobs`), the
reconcile loop's steps (:mod:`.memory_loop`), the inbox and histories
(:mod:`.memory_inbox`), the intake (:mod:`.memory_intake`), and here the rest.

Each call is atomic: it gives the event loop one turn first (as a round trip to a
database would: a caller looping on the store lets other tasks run, and a caller
cancelled there leaves nothing half done), then does all of its work without
awaiting anything, so no other call sees it halfway and no lock is needed. Times
come from the arguments. What the SQL drivers do only for a database is a no-op:
``migrate`` (the tables are made with the store), ``check_schema``, ``jobs_vacuum``
(False: nothing to reclaim), ``ping``.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from hipq.errors import StoreConflict, StoreError
from hipq.jobs import ErrorKind, Job, JobState
from hipq.store.driver import VERSION_KEY
from hipq.store.memory_inbox import MemoryInbox
from hipq.store.memory_intake import MemoryIntake
from hipq.store.memory_jobs import MemoryJobs
from hipq.store.memory_loop import MemoryLoop
from hipq.store.memory_seen import MemorySeen
from hipq.store.memory_tables import copied
from hipq.store.records import Backoff, QueueRecord, QueueState
from hipq.store.rows import queue_record, stored_settings
from hipq.store.versions import SCHEMA_VERSION

C = TypeVar("C", bound=type)
Method = Callable[..., Coroutine[Any, Any, Any]]


def _one_turn_each(cls: C) -> C:
    """Make every public coroutine method of ``cls`` (its bases' too) but ``close``
    give the event loop one turn, then refuse to run on a closed store."""
    for name in dir(cls):
        method = getattr(cls, name)
        if name.startswith("_") or name == "close" or not inspect.iscoroutinefunction(method):
            continue
        setattr(cls, name, _turn_first(method))
    return cls


def _turn_first(method: Method) -> Method:
    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)  # noqa: TID251 (one turn of the loop, as a round trip gives)
        if self._closed:
            raise StoreError("the memory store is closed")
        return await method(self, *args, **kwargs)

    return call


def _given_back(job: Job) -> bool:
    """Whether the job waits because the partner said "not now" to its last try: its
    error as :func:`hipq.engine.decide.change_for` requeues a throttled try given back
    (kind ``throttled`` with ``in_a_row``), said by the partner (``data.from_partner``),
    as the SQL drivers' resume reads it."""
    error = job.error
    if not isinstance(error, dict) or error.get("kind") != ErrorKind.THROTTLED:
        return False
    data = error.get("data")
    return "in_a_row" in error and isinstance(data, dict) and data.get("from_partner") is True


def _read(row: dict[str, Any]) -> dict[str, Any]:
    """A row of ``queues`` as a read gives it: its settings a new object, as a
    database decodes them anew (what a record's reader does to them stays there)."""
    return {**row, "config": copied(row["config"])}


def _state_copy(state: QueueState) -> QueueState:
    return replace(state, held=None if state.held is None else dict(state.held),
                   budget=None if state.budget is None else copy.deepcopy(state.budget))


@_one_turn_each
class MemoryStore(MemoryIntake, MemorySeen, MemoryInbox, MemoryLoop, MemoryJobs):
    """The :class:`~hipq.store.base.Store` in memory (``dialect``: ``"memory"``)."""

    # -- lifecycle (no database: no-ops) ---------------------------------------------------

    async def ping(self) -> None:
        """Always reachable."""

    async def migrate(self) -> int:
        """The tables are made with the store: only the version is recorded, as the
        SQL drivers record it.

        Raises:
            SchemaError: never (nothing newer can be stored here).
        """
        self._t.meta[VERSION_KEY] = str(SCHEMA_VERSION)
        return SCHEMA_VERSION

    async def meta_get_or_set(self, key: str, value: str) -> str:
        return self._t.meta.setdefault(key, value)

    async def jobs_vacuum(self) -> bool:
        return False  # nothing to reclaim

    # -- queues ------------------------------------------------------------------------

    async def queue_upsert(self, settings: Mapping[str, Any], *, now: datetime) -> bool:
        queue_id, body, paused = stored_settings(settings)
        old = self._t.queues.get(queue_id)
        self._t.queues[queue_id] = {"id": queue_id, "config": copied(body), "paused": paused,
                                    "created_at": now if old is None else old["created_at"],
                                    "updated_at": now}
        return old is None

    async def queue_get(self, queue_id: str) -> QueueRecord | None:
        row = self._t.queues.get(queue_id)
        return None if row is None else queue_record(_read(row))

    async def _queue_rows(self) -> Sequence[Any]:
        return [_read(self._t.queues[queue_id]) for queue_id in sorted(self._t.queues)]

    async def queue_set_paused(self, queue_id: str, paused: bool, *, now: datetime) -> bool:
        row = self._t.queues.get(queue_id)
        if row is None:
            return False
        self._t.queues[queue_id] = {**row, "paused": paused, "updated_at": now}
        return True

    # -- leases and membership -----------------------------------------------------------

    async def lease_acquire_many(self, *, queues: Sequence[str], owner: str, now: datetime,
                                 seconds: float) -> set[str]:
        expires = now + timedelta(seconds=seconds)
        held: set[str] = set()
        for queue in queues:
            lease = self._t.leases.get(queue)
            if lease is None or lease[0] == owner or lease[2] < now:
                acquired = lease[1] if lease is not None and lease[0] == owner else now
                self._t.leases[queue] = (owner, acquired, expires)
                held.add(queue)
        return held

    async def lease_release_all(self, *, owner: str) -> int:
        return self._release([q for q, lease in self._t.leases.items() if lease[0] == owner],
                             owner)

    async def lease_release_many(self, *, queues: Sequence[str], owner: str) -> int:
        return self._release(queues, owner)

    def _release(self, queues: Sequence[str], owner: str) -> int:
        mine = [q for q in dict.fromkeys(queues)
                if q in self._t.leases and self._t.leases[q][0] == owner]
        for queue in mine:
            del self._t.leases[queue]
        return len(mine)

    async def lease_list(self) -> dict[str, tuple[str, datetime]]:
        return {q: (owner, expires) for q, (owner, _, expires) in self._t.leases.items()}

    async def daemon_heartbeat(self, *, owner: str, now: datetime,
                               seconds: float) -> list[str]:
        daemons = self._t.daemons
        started = daemons[owner][0] if owner in daemons else now
        daemons[owner] = (started, now + timedelta(seconds=seconds))
        forget = now - timedelta(seconds=seconds)  # long gone: nobody needs their row
        for gone in [d for d, (_, expires) in daemons.items() if expires < forget and d != owner]:
            del daemons[gone]
        return sorted(d for d, (_, expires) in daemons.items() if expires >= now or d == owner)

    async def daemon_leave(self, *, owner: str) -> None:
        self._t.daemons.pop(owner, None)

    # -- the partner's word (docs/throttling.md) --------------------------------------------

    async def backoff_list(self, *, queues: Sequence[str] | None = None) -> list[Backoff]:
        wanted = None if queues is None else set(queues)
        return [b for key, b in sorted(self._t.backoffs.items())
                if wanted is None or key[0] in wanted]

    async def backoff_replace(self, *, queue: str, backoffs: Sequence[Backoff]) -> None:
        """Raises StoreConflict for two pauses of one scope (the table's primary key)."""
        scopes = [b.scope for b in backoffs]
        if len(set(scopes)) < len(scopes):
            raise StoreConflict("the database refused the write: two pauses of one scope")
        for key in [k for k in self._t.backoffs if k[0] == queue]:
            del self._t.backoffs[key]
        for backoff in backoffs:
            self._t.backoffs[(queue, backoff.scope)] = replace(backoff, queue=queue)

    async def backoff_clear(self, *, queue: str, now: datetime | None = None) -> int:
        keys = [k for k in self._t.backoffs if k[0] == queue]
        for key in keys:
            del self._t.backoffs[key]
        if now is not None:
            for job in list(self._t.live.get(queue, {}).values()):
                if job.status is JobState.QUEUED and job.run_at > now and _given_back(job):
                    self._t.put_live(job.evolve(run_at=now, updated_at=now))
        return len(keys)

    async def queue_state_list(self, *, queues: Sequence[str] | None = None
                               ) -> dict[str, QueueState]:
        states = self._t.queue_state
        wanted = list(states) if queues is None else [q for q in queues if q in states]
        return {q: _state_copy(states[q]) for q in wanted}

    async def queue_state_save(self, states: Sequence[QueueState]) -> None:
        for state in states:
            self._t.queue_state[state.queue] = _state_copy(state)

    # -- housekeeping --------------------------------------------------------------------

    async def archive_prune(self, *, before: datetime, limit: int) -> int:
        t = self._t
        old = sorted((j for j in t.archived.values()
                      if j.finished_at is not None and j.finished_at < before),
                     key=lambda j: (j.finished_at, j.queue, j.id))[:limit]
        for job in old:
            t.forget_archived(job.key)
        applied = sorted((e for e in t.inbox.values()
                          if e.applied_at is not None and e.applied_at < before),
                         key=lambda e: (e.applied_at, e.id))[:limit]
        for entry in applied:
            t.forget_response(entry.id)
        return max(len(old), len(applied))

"""A queue's live jobs (queued or running), page by page.

Shared by ``GET /v1/queued-jobs``, ``hipq jobs`` and the dashboard. Queued jobs come
in queue order (the queue's ``ordering``), running jobs by launch time. The cursor
is the last job's sort key, opaque to clients (URL-safe base64 of a JSON array): a
page never repeats or skips a job that stays where it was; jobs that move (launched,
retried) between pages may appear on a later page or not at all, as in any keyset
listing.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hipq.errors import HipqError, QueueNotFound
from hipq.jobs import Job, JobState, Ordering
from hipq.store import Store

LIVE_STATES = (JobState.QUEUED.value, JobState.RUNNING.value)
MAX_CURSOR_CHARS = 2000


class InvalidCursor(HipqError):
    """A cursor this listing did not give out."""


@dataclass(frozen=True, slots=True)
class LivePage:
    jobs: list[Job]
    next_cursor: str | None


def sort_key(job: Job, *, state: str, ordering: Ordering) -> list[Any]:
    """The keyset position of ``job`` in the listing's order (see the store)."""
    if state == JobState.RUNNING.value:
        return [job.launched_at, job.id]
    if ordering is Ordering.TIME_THEN_PRIORITY:
        return [job.run_at, job.priority, job.id]
    return [job.priority, job.run_at, job.id]


def encode_cursor(state: str, key: list[Any]) -> str:
    wire = [state, *[{"t": v.isoformat()} if isinstance(v, datetime) else v for v in key]]
    raw = json.dumps(wire, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, *, state: str, ordering: Ordering) -> list[Any]:
    """The sort key in ``cursor``; :class:`InvalidCursor` unless it is one given out
    for the same state and order."""
    try:
        if len(cursor) > MAX_CURSOR_CHARS:
            raise ValueError("too long")
        wire = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(wire, list) or not wire or wire[0] != state:
            raise ValueError("another listing's cursor")
        key = [_value(v) for v in wire[1:]]
        if [type(v) for v in key] != _key_types(state, ordering):
            raise ValueError("another order's cursor")
    except (ValueError, TypeError, KeyError, UnicodeError, binascii.Error):
        raise InvalidCursor("the cursor is not one this listing gave out") from None
    return key


def _value(v: Any) -> Any:
    if isinstance(v, dict):
        when = datetime.fromisoformat(v["t"])
        if when.tzinfo is None:
            raise ValueError("naive time")
        return when
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise ValueError("bad key part")
    if isinstance(v, int) and not -(2**31) <= v < 2**31:  # priorities are 32-bit columns
        raise ValueError("out of range")
    return v


def _key_types(state: str, ordering: Ordering) -> list[type]:
    if state == JobState.RUNNING.value:
        return [datetime, str]
    if ordering is Ordering.TIME_THEN_PRIORITY:
        return [datetime, int, str]
    return [int, datetime, str]


@dataclass(frozen=True, slots=True)
class LiveListing:
    """One listing (a queue, a state, a starting cursor) read in chunks."""

    store: Store
    queue: str
    state: str
    ordering: Ordering
    after: list[Any] | None

    @classmethod
    async def open(cls, store: Store, *, queue: str, state: str,
                   cursor: str | None) -> LiveListing:
        """Raises :class:`~hipq.errors.QueueNotFound` for an unknown queue and
        :class:`InvalidCursor` for a cursor another listing gave out."""
        record = await store.queue_get(queue)
        if record is None:
            raise QueueNotFound(queue)
        ordering = record.spec.ordering
        after = None if cursor is None else decode_cursor(cursor, state=state,
                                                           ordering=ordering)
        return cls(store, queue, state, ordering, after)

    async def read(self, limit: int, after: list[Any] | None) -> list[Job]:
        """Up to ``limit`` jobs after the sort key ``after``."""
        return await self.store.job_list_live(queue=self.queue, state=self.state,
                                              ordering=self.ordering, limit=limit, after=after)

    def key_of(self, job: Job) -> list[Any]:
        return sort_key(job, state=self.state, ordering=self.ordering)

    def cursor_after(self, job: Job) -> str:
        return encode_cursor(self.state, self.key_of(job))


async def list_live(store: Store, *, queue: str, state: str, limit: int,
                    cursor: str | None = None) -> LivePage:
    """One page of ``queue``'s jobs in ``state`` (queued or running), for the CLI.
    Raises :class:`~hipq.errors.QueueNotFound` for an unknown queue."""
    listing = await LiveListing.open(store, queue=queue, state=state, cursor=cursor)
    jobs = await listing.read(limit + 1, listing.after)
    page = jobs[:limit]
    next_cursor = listing.cursor_after(page[-1]) if len(jobs) > limit else None
    return LivePage(jobs=page, next_cursor=next_cursor)

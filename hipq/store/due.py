"""The due-jobs query of the reconcile loop's fetch (step 1), for both drivers.

``now`` and the limit are named bind parameters (:data:`DUE_NOW`, :data:`DUE_LIMIT`)
so a driver can compile the query once per queue and fetch shape and only change
those two values on each tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from hipq.jobs import Ordering
from hipq.store import schema as s

DUE_NOW, DUE_LIMIT = "due_now", "due_limit"  # the parameters of a due query that vary


@dataclass(frozen=True, slots=True, kw_only=True)
class DueShape:
    """What selects and orders a due query, apart from ``now`` and the limit: a
    driver may compile one statement per shape.

    ``group`` keeps one quota group; ``default_group_excluding`` keeps the jobs
    in none of the listed groups. A job with an ordering key is due only if it
    is the head of its key: no job of the key is running and none queued comes
    before it (``key_mode="relaxed_on_retry"``: a queued job waiting for a
    retry does not hold the later ones back).
    """

    queue: str
    ordering: Ordering
    critical_only: bool = False
    group: str | None = None
    default_group_excluding: tuple[str, ...] | None = None
    key_mode: str = "strict"


def due_query(shape: DueShape, *, now: datetime, limit: int) -> sa.Select[Any]:
    """Queued jobs of ``shape.queue`` with ``run_at <= now`` in the queue's order
    (time then priority when ``critical_only``), at most ``limit``."""
    t = s.jobs
    order = ((t.c.run_at, t.c.priority, t.c.id)
             if shape.ordering is Ordering.TIME_THEN_PRIORITY or shape.critical_only
             else (t.c.priority, t.c.run_at, t.c.id))
    due_now = sa.bindparam(DUE_NOW, now, type_=s.UTCDateTime)
    stmt = (sa.select(t).where(t.c.queue == shape.queue, t.c.status == s.QUEUED,
                               t.c.run_at <= due_now,
                               sa.or_(t.c.ordering_key.is_(None),
                                      ~_key_blocked(due_now, shape.key_mode)))
            .order_by(*order).limit(sa.bindparam(DUE_LIMIT, limit, type_=sa.Integer)))
    if shape.critical_only:
        stmt = stmt.where(t.c.critical == sa.true())
    if shape.group is not None:
        stmt = stmt.where(t.c.group_key == shape.group)
    elif shape.default_group_excluding is not None:
        stmt = stmt.where(sa.or_(t.c.group_key.is_(None),
                                 t.c.group_key.not_in(list(shape.default_group_excluding))))
    return stmt


def _key_blocked(now: Any, key_mode: str) -> sa.Exists:
    t, k = s.jobs, s.jobs.alias("key_head")
    earlier = sa.and_(k.c.status == s.QUEUED,
                      sa.tuple_(k.c.key_order_at, k.c.id) < sa.tuple_(t.c.key_order_at, t.c.id))
    if key_mode == "relaxed_on_retry":
        earlier = sa.and_(earlier, sa.not_(sa.and_(k.c.attempt > 0, k.c.run_at > now)))
    return sa.exists().where(k.c.queue == t.c.queue, k.c.ordering_key == t.c.ordering_key,
                             sa.or_(k.c.status == s.RUNNING, earlier))

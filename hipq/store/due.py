"""What a due-jobs fetch (the reconcile loop's step 1) asks for, apart from ``now``
and the limit: each driver turns a :class:`DueShape` into its statement (SQLite's
in :mod:`hipq.store.sqlite`, PostgreSQL's ``due_*`` blocks of ``postgres.sql``)."""

from __future__ import annotations

from dataclasses import dataclass

from hipq.jobs import Ordering

RELAXED = "relaxed_on_retry"  # the key mode where a job waiting for a retry holds no one back


@dataclass(frozen=True, slots=True, kw_only=True)
class DueShape:
    """What selects and orders a due query, apart from ``now`` and the limit.

    ``group`` keeps one quota group; ``default_group_excluding`` keeps the jobs
    in none of the listed groups. A job with an ordering key is due only if it
    is the head of its key: no job of the key is running and none queued comes
    before it (``key_mode="relaxed_on_retry"``: a queued job waiting for a
    retry does not hold the later ones back). ``critical_only`` reads critical
    jobs only, in time-then-priority order whatever ``ordering`` says.
    """

    queue: str
    ordering: Ordering
    critical_only: bool = False
    group: str | None = None
    default_group_excluding: tuple[str, ...] | None = None
    key_mode: str = "strict"

    @property
    def by_time(self) -> bool:
        """Whether the order is (run_at, priority, id), else (priority, run_at, id)."""
        return self.ordering is Ordering.TIME_THEN_PRIORITY or self.critical_only

    @property
    def relaxed(self) -> bool:
        return self.key_mode == RELAXED

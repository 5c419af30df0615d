"""Helpers for tests, benchmarks and embedding: a fake clock, an in-memory target,
a bulk loader of queued jobs (PostgreSQL) and a one-call migration."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from hipq.clock import Timer, loop_timer
from hipq.jobs import Job, JobState, generated_key
from hipq.targets.interface import Accepted, Completed, LaunchOutcome

__all__ = ["FakeClock", "MemoryTarget", "bulk_insert_jobs_sql", "migrate_database"]


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
        self._mono = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        """A timer in real seconds, as :class:`hipq.clock.SystemClock`'s: a test moves
        this clock by hand, and a timer must not wait for that."""
        return loop_timer(seconds, callback)

    def advance(self, seconds: float = 0.0, **delta: float) -> datetime:
        step = timedelta(seconds=seconds, **delta)
        self._now += step
        self._mono += step.total_seconds()
        return self._now

    def set(self, when: datetime) -> None:
        self._mono += (when - self._now).total_seconds()
        self._now = when


Behaviour = Callable[[Job], Awaitable[LaunchOutcome] | LaunchOutcome]


class MemoryTarget:
    """Records every launch. By default answers :class:`Accepted` (the outcome is
    reported later, like an HTTP callback); ``behaviour`` can answer otherwise."""

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.launched: list[Job] = []
        self.behaviour = behaviour

    async def launch(self, job: Job) -> LaunchOutcome:
        self.launched.append(job)
        if self.behaviour is None:
            return Accepted()
        outcome = self.behaviour(job)
        if asyncio.iscoroutine(outcome):
            return await outcome  # type: ignore[no-any-return]
        return outcome  # type: ignore[return-value]

    async def close(self) -> None:
        return None

    def ids(self) -> list[str]:
        return [job.id for job in self.launched]


def succeed(job: Job) -> Completed:
    """A MemoryTarget behaviour: every launch succeeds at once."""
    return Completed(status="succeeded", result={"echo": job.id})


def claimed_jobs(n: int, *, queue: str = "q", at: datetime | None = None) -> list[Job]:
    """``n`` running jobs as a claim returns them: every string and timestamp its
    own object, as a database driver decodes each row (for memory measurements)."""

    def fresh(text: str) -> str:
        return "".join(list(text))  # equal, not the same object

    start = at or datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    jobs = []
    for i in range(n):
        launched = start + timedelta(microseconds=i % 1000)  # claims of a few ticks
        token = secrets.token_hex(16)  # 32 hex digits, as hipq makes tokens
        jobs.append(Job(
            id=f"job-{i:08d}", queue=fresh(queue), data={"n": i, "region": fresh("eu")},
            status=JobState.RUNNING, run_at=start - timedelta(seconds=i % 97),
            created_at=start - timedelta(seconds=i % 89), updated_at=launched,
            launched_at=launched, deadline=launched + timedelta(days=1),
            correlation_key=generated_key(token, 1), token=token, attempt=1,
            max_attempts=3, owner=fresh("daemon-1"), launch_confirmed=True,
            body_hash=secrets.token_hex(32), timeout_seconds=float(86400 + i % 1),
            key_order_at=start))
    return jobs


# One SQL expression per column of ``jobs`` for row number ``i`` (from
# generate_series): jobs spread over the past day (all due), over 5 priorities, like
# a real backlog. $1 is the queue, $2 "now".
BULK_JOB_COLUMNS: dict[str, str] = {
    "queue": "$1::text",
    "id": "'job-' || lpad(i::text, 8, '0')",
    "token": "md5('token' || i::text)",
    "status": "'queued'",
    "data": "jsonb_build_object('n', i)",
    "run_at": "$2::timestamptz - make_interval(secs => (i * 7919) % 86400)",
    "priority": "100 + (i % 5) * 10",
    "weight": "1",
    "critical": "false",
    "timeout_seconds": "3600.0",
    "correlation_fixed": "false",
    "attempt": "0",
    "max_attempts": "3",
    "created_at": "$2::timestamptz",
    "updated_at": "$2::timestamptz",
    "launch_confirmed": "false",
    "body_hash": "md5('body' || i::text)",
}


def bulk_insert_jobs_sql(**overrides: str) -> str:
    """``INSERT INTO jobs ... SELECT ... FROM generate_series($3, $4) AS i`` (PostgreSQL;
    $1 queue, $2 now): millions of queued jobs in one statement. ``overrides``
    replace column expressions; columns named nowhere are NULL, and the schema is
    checked (a new NOT NULL column, or an unknown one, fails loudly)."""
    from hipq.store import schema as s

    exprs = {**BULK_JOB_COLUMNS, **overrides}
    columns = [c.name for c in s.jobs.columns]
    missing = [c.name for c in s.jobs.columns if not c.nullable and c.name not in exprs]
    unknown = sorted(set(exprs) - set(columns))
    if missing or unknown:
        raise ValueError(f"bulk loader out of date with hipq/store/schema.py: NOT NULL "
                         f"columns missing {missing}, unknown columns {unknown}")
    values = ", ".join(exprs.get(c, "NULL") for c in columns)
    return (f"INSERT INTO jobs ({', '.join(columns)}) "
            f"SELECT {values} FROM generate_series($3::bigint, $4::bigint) AS i")


async def migrate_database(url: str) -> int:
    """Create or upgrade the schema at ``url``; the schema version."""
    from hipq.store import open_store

    store = await open_store(url)
    try:
        return await store.migrate()
    finally:
        await store.close()

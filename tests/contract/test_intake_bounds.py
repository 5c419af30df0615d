"""The intake's reads are bounded in bytes, and an odd row never stalls the others
(docs/from-your-database.md, "Limits"), on each database.

Rows here are written by the database's owner straight into ``job_intake``,
bypassing ``hipq_enqueue()`` and ``hipq.sql`` (so bypassing their checks): what a
read returns is bounded by the read itself. A read measures each row in SQL before
it reads the row's values: a row over the limit comes without its data, with why;
the rows of one read hold at most its byte budget (and one row over it). A row the
store cannot read (a time out of range, JSON text that is not one value) is
rejected on its own, and the others are ingested. Rejected rows are pruned by
retention whatever time they carry.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from hipq import intake
from hipq.config import QueueConfig, Settings
from hipq.daemon import Daemon
from hipq.errors import JobNotFound
from hipq.intake import Intake
from hipq.service import Hipq
from hipq.store import Store, open_store
from hipq.store.records import INTAKE_OTHER, INTAKE_OTHER_NAMES, IntakeRow
from hipq.testing import FakeClock

MAX_BYTES = 50_000  # the intake's limit in these tests (api.max_body_bytes)
BUDGET = 100_000  # bytes a read may hold


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    """The store on ``db_url``, the database the rows are written to."""
    opened = await open_store(db_url)
    try:
        yield opened
        assert opened.checked_out() == 0  # type: ignore[attr-defined]
    finally:
        await opened.close()


def _pg(db_url: str) -> str:
    return db_url.replace("postgresql+asyncpg://", "postgresql://", 1)


def _sqlite_path(db_url: str) -> str:
    return db_url.split(":///", 1)[1]


async def owner_rows(db_url: str, backend: str, rows: list[dict[str, Any]]) -> None:
    """Rows straight into ``job_intake`` as its owner would write them, no check on
    the way. Values as SQL takes them on that database: times are text PostgreSQL
    casts (``'infinity'``, ``'20000-01-01'``) or, on SQLite, whatever is stored."""
    columns = ("queue", "job_id", "data", "run_after", "fields", "enqueued_at", "error",
               "rejected_at")
    full = [{"job_id": None, "data": "{}", "run_after": None, "fields": "{}",
             "enqueued_at": "now" if backend == "postgresql" else 1_767_614_400.0,
             "error": None, "rejected_at": None} | row for row in rows]
    if backend == "postgresql":
        conn = await asyncpg.connect(_pg(db_url))
        try:
            await conn.executemany(
                "INSERT INTO job_intake (queue, job_id, data, run_after, fields, enqueued_at, "
                "error, rejected_at) VALUES ($1, $2, $3::text::jsonb, $4::text::timestamptz, "
                "$5::text::jsonb, $6::text::timestamptz, $7, $8::text::timestamptz)",
                [tuple(row[c] for c in columns) for row in full])
        finally:
            await conn.close()
        return
    await asyncio.to_thread(_sqlite_rows, db_url, columns,
                            [tuple(row[c] for c in columns) for row in full])


def _sqlite_rows(db_url: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """In a thread: a daemon of the test's event loop may hold the one write lock."""
    con = sqlite3.connect(_sqlite_path(db_url), isolation_level=None, timeout=30)
    try:
        con.executemany(f"INSERT INTO job_intake ({', '.join(columns)}) VALUES "
                        f"({', '.join('?' for _ in columns)})", rows)
    finally:
        con.close()


def _blob(n: int, size: int) -> str:
    """A JSON object of about ``size`` bytes."""
    return f'{{"n": {n}, "pad": "{"x" * size}"}}'


def _bytes(rows: list[IntakeRow]) -> int:
    """What a read carried: the rows' data and fields as text."""
    return sum(len(r.data or "") + len(r.fields or "") for r in rows
               if isinstance(r.data, str | None))


class CountingReads:
    """The store, with what each intake read returned kept (the rest passes through)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.reads: list[list[IntakeRow]] = []

    async def intake_pending(self, **kwargs: Any) -> Any:
        rows = await self._store.intake_pending(**kwargs)
        self.reads.append(rows)
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def _biggish(db_url: str, backend: str) -> tuple[list[str], list[str]]:
    """Twelve rows of queue q: ten of 30 KB, two of 80 KB (over :data:`MAX_BYTES`)."""
    good, big = [], []
    rows = []
    for n in range(12):
        job_id = f"j{n:02d}"
        size = 80_000 if n in (3, 8) else 30_000
        (big if size > MAX_BYTES else good).append(job_id)
        rows.append({"queue": "q", "job_id": job_id, "data": _blob(n, size)})
    await owner_rows(db_url, backend, rows)
    return good, big


async def test_a_read_holds_its_byte_budget_and_leaves_a_row_over_the_limit_unread(
        store: Store, db_url: str, backend: str) -> None:
    good, big = await _biggish(db_url, backend)
    seen: list[IntakeRow] = []
    after = 0
    for _ in range(20):
        rows = await store.intake_pending(queues=["q"], limit=1000, after=after,
                                          max_bytes=MAX_BYTES, budget=BUDGET)
        if not rows:
            break
        assert _bytes(rows) <= BUDGET + MAX_BYTES, [r.job_id for r in rows]
        assert len(rows) < 12  # cut by bytes, not by the limit of 1,000
        seen += rows
        after = rows[-1].id
    assert [r.job_id for r in seen] == sorted(good + big)  # every row, once, in order
    for row in seen:
        assert row.size > 0
        if row.job_id in big:
            assert (row.data, row.fields) == (None, None)  # measured, never read
            assert row.problem is not None
            assert f"over the limit of {MAX_BYTES}" in row.problem
        else:
            assert row.problem is None
            assert '"pad"' in row.data


async def test_ingesting_many_biggish_rows_stays_within_the_budget_of_each_read(
        store: Store, db_url: str, backend: str, clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(intake, "READ_BYTES", BUDGET)
    service = Hipq(store, clock=clock)
    await service.create_queue(QueueConfig(id="q"))
    good, big = await _biggish(db_url, backend)
    reads = CountingReads(store)
    ingest = Intake(service, reads, clock, max_bytes=MAX_BYTES)  # type: ignore[arg-type]
    for _ in range(20):
        if not await ingest.ingest({"q"}, {"q"}):
            break
    assert await ingest.ingest({"q"}, {"q"}) is False
    assert len(reads.reads) >= 4  # 12 rows of 30-80 KB in reads of 100 KB
    for rows in reads.reads:
        assert _bytes(rows) <= BUDGET + MAX_BYTES
    for job_id in good:
        job = await store.job_get("q", job_id)
        assert job is not None, job_id
    for job_id in big:
        assert await store.job_get("q", job_id) is None
    rejected = {r.job_id: r.error for r in await store.intake_rejected_page(limit=100)}
    assert set(rejected) == set(big)
    assert all(f"over the limit of {MAX_BYTES}" in (e or "") for e in rejected.values())
    assert await store.intake_pending(queues=["q"], limit=100) == []


async def test_orphan_rows_are_rejected_without_reading_their_values(
        store: Store, db_url: str, backend: str) -> None:
    await _biggish(db_url, backend)
    later = datetime(2100, 1, 1, tzinfo=UTC)
    orphans = await store.intake_orphans(known=[], before=later, limit=100)
    assert len(orphans) == 12
    assert all(r.data is None and r.fields is None for r in orphans)


ODD_ROWS = {  # rows of queue q that no store could read as they are, and why
    "postgresql": [
        ({"job_id": "inf", "run_after": "infinity"}, "run_after"),
        ({"job_id": "far", "run_after": "20000-01-01 00:00:00+00"}, "run_after"),
        ({"job_id": "ancient", "run_after": "0001-01-01 00:00:00+00"}, "run_after"),
        ({"job_id": "never", "enqueued_at": "-infinity"}, "enqueued_at"),
        ({"job_id": "later", "enqueued_at": "50000-01-01 00:00:00+00"}, "enqueued_at"),
    ],
    "sqlite": [
        ({"job_id": "glued", "data": '{}},{"data":{}'}, "data"),
        ({"job_id": "half", "data": '{"a": '}, "data"),
        ({"job_id": "swap", "data": '{"x": 1}},{"data":{"y": 2}'}, "data"),
        ({"job_id": "bad-fields", "fields": '{"priority": 1'}, "fields"),
        ({"job_id": "blob", "data": b"\x00\x01"}, "data"),
        ({"job_id": "text-time", "enqueued_at": "yesterday"}, "enqueued_at"),
        ({"job_id": "soon", "run_after": "soon"}, "run_after"),
        ({"job_id": "inf", "run_after": float("inf")}, "run_after"),
        ({"job_id": "far", "run_after": 1e15}, "run_after"),
        ({"job_id": 7, "data": "{}"}, None),  # stored as text '7': a fine id
    ],
}


async def test_a_row_the_store_cannot_read_is_rejected_on_its_own(
        store: Store, db_url: str, backend: str, clock: FakeClock) -> None:
    service = Hipq(store, clock=clock)
    await service.create_queue(QueueConfig(id="q"))
    odd = ODD_ROWS[backend]
    rows = [{"queue": "q", "job_id": "first", "data": '{"ok": 1}'}]
    rows += [{"queue": "q", **row} for row, _ in odd]
    rows += [{"queue": "q", "job_id": "last", "data": '{"ok": 2}'}]
    await owner_rows(db_url, backend, rows)
    ingest = Intake(service, store, clock)
    for _ in range(3):
        await ingest.ingest({"q"}, {"q"})  # never raises: nothing stalls the queue
    assert await store.intake_pending(queues=["q"], limit=100) == []
    for job_id in ("first", "last"):
        assert await store.job_get("q", job_id) is not None
    rejected = {r.job_id: r.error or "" for r in await store.intake_rejected_page(limit=100)}
    for row, column in odd:
        if column is None:
            assert await store.job_get("q", str(row["job_id"])) is not None
            continue
        assert column in rejected.get(str(row["job_id"]), ""), (row, rejected)


async def test_the_rejected_listing_cuts_values_in_the_store_and_survives_odd_times(
        store: Store, db_url: str, backend: str) -> None:
    pg = backend == "postgresql"
    now = "2030-01-01 00:00:00+00" if pg else 1_893_456_000.0
    await owner_rows(db_url, backend, [
        {"queue": "q", "job_id": "i" * 10_000, "data": _blob(0, 100_000),
         "fields": '{"ordering_key": "%s"}' % ("k" * 9_000), "error": "e" * 9_000,
         "rejected_at": now},
        {"queue": "q" * 5_000, "job_id": "odd", "run_after": "infinity" if pg else "soon",
         "enqueued_at": "-infinity" if pg else "yesterday", "error": "x", "rejected_at": now},
        {"queue": "q", "job_id": "future", "error": "x",
         "rejected_at": "9999-12-31 12:00:00+00" if pg else 253402257600.0},
        {"queue": "q", "job_id": "never", "error": "x",
         "rejected_at": "infinity" if pg else "tomorrow"},
        {"queue": "q", "job_id": "plain", "error": "x", "rejected_at": now},
    ])
    rows = await store.intake_rejected_page(limit=100, value_chars=4096)
    by_id = {(r.job_id or "")[:20]: r for r in rows}
    assert set(by_id) == {"i" * 20, "odd", "plain"}  # rows with a readable rejection time
    huge = by_id["i" * 20]
    assert set(huge.cut) == {"id", "data", "fields", "error"}
    assert len(huge.job_id or "") == 4096
    assert isinstance(huge.data, str)
    assert len(huge.data) == 4096
    assert len(huge.fields) == 4096
    assert len(huge.error or "") == 4096
    odd = by_id["odd"]
    assert odd.cut == ("queue",)
    assert len(odd.queue) == 4096
    assert (odd.run_after, odd.enqueued_at) == (None, None)  # unreadable: shown as none
    assert by_id["plain"].cut == ()


async def test_rejected_rows_are_pruned_by_retention_whatever_time_they_carry(
        store: Store, db_url: str, backend: str) -> None:
    pg = backend == "postgresql"
    now = datetime(2030, 6, 1, tzinfo=UTC)

    def when(days: float) -> Any:
        at = now + timedelta(days=days)
        return at.isoformat() if pg else at.timestamp()

    await owner_rows(db_url, backend, [
        {"queue": "q", "job_id": "old", "error": "x", "rejected_at": when(-40)},
        {"queue": "q", "job_id": "young", "error": "x", "rejected_at": when(-1)},
        {"queue": "q", "job_id": "skewed", "error": "x", "rejected_at": when(0.01)},
        {"queue": "q", "job_id": "future", "error": "x", "rejected_at": when(3000)},
        {"queue": "q", "job_id": "max", "error": "x",
         "rejected_at": "9999-12-31 00:00:00+00" if pg else 253402214400.0},
        {"queue": "q", "job_id": "inf", "error": "x",
         "rejected_at": "infinity" if pg else float("inf")},
        {"queue": "q", "job_id": "none", "error": "x", "rejected_at": None},
        {"queue": "q", "job_id": "text", "error": "x",
         "rejected_at": "-infinity" if pg else "some day"},
        {"queue": "q", "job_id": "pending"},
    ])
    pruned = await store.intake_prune(before=now - timedelta(days=30), now=now, limit=2)
    assert pruned == 2
    while pruned:
        pruned = await store.intake_prune(before=now - timedelta(days=30), now=now, limit=2)
    left = await _ids(db_url, backend)
    assert left == ["pending", "skewed", "young"]


async def _ids(db_url: str, backend: str) -> list[str]:
    if backend == "postgresql":
        conn = await asyncpg.connect(_pg(db_url))
        try:
            return sorted(r[0] for r in await conn.fetch("SELECT job_id FROM job_intake"))
        finally:
            await conn.close()
    con = sqlite3.connect(_sqlite_path(db_url))
    try:
        return sorted(r[0] for r in con.execute("SELECT job_id FROM job_intake"))
    finally:
        con.close()


async def test_the_daemons_pruning_prunes_rejected_rows(db_url: str, backend: str,
                                                         tmp_path: Path) -> None:
    clock = FakeClock(datetime(2030, 6, 1, tzinfo=UTC))
    await owner_rows(db_url, backend, [
        {"queue": "q", "job_id": "old", "error": "x",
         "rejected_at": "2030-01-01 00:00:00+00" if backend == "postgresql" else 1_893_456_000.0},
        {"queue": "q", "job_id": "inf", "error": "x",
         "rejected_at": "infinity" if backend == "postgresql" else float("inf")},
    ])
    settings = Settings.model_validate({"database": {"url": db_url}, "api": {"enabled": False},
                                        "archive": {"retention_days": 30}})
    daemon = Daemon(settings, clock=clock)
    await daemon.open()
    try:
        await daemon.prune()
    finally:
        await daemon.shutdown()
    assert await _ids(db_url, backend) == []


async def test_a_pending_row_over_the_limit_is_not_read_to_be_shown(
        store: Store, db_url: str, backend: str, clock: FakeClock) -> None:
    service = Hipq(store, clock=clock)
    await service.create_queue(QueueConfig(id="q"))
    await store.intake_limit_set(MAX_BYTES)
    await owner_rows(db_url, backend, [
        {"queue": "q", "job_id": "big", "data": _blob(1, 80_000)},
        {"queue": "q", "job_id": "small", "data": _blob(2, 100)},
    ])
    row = await store.intake_find("q", "big")
    assert row is not None
    assert row.data is None
    assert row.problem is not None
    with pytest.raises(JobNotFound):  # it will be rejected: not shown as a queued job
        await service.get_job("q", "big")
    job, _ = await service.get_job("q", "small")
    assert job.data["n"] == 2


async def test_the_counts_are_bounded_whatever_queue_names_producers_wrote(
        store: Store, db_url: str, backend: str, clock: FakeClock) -> None:
    """/v1/stats, /metrics and ``hipq intake`` read the intake's counts per queue: a
    producer naming many queues (or long names) cannot make that read large. Every
    queue that exists is counted on its own, other names up to a bound, the rest
    summed under "(other)"."""
    service = Hipq(store, clock=clock)
    await service.create_queue(QueueConfig(id="zz-real"))
    names = [f"junk-{n:04d}" + "x" * 500 for n in range(INTAKE_OTHER_NAMES + 50)]
    await owner_rows(db_url, backend, [{"queue": name} for name in names]
                     + [{"queue": "zz-real"}, {"queue": "zz-real", "error": "e",
                                             "rejected_at": None}])
    counts = await store.intake_counts()
    assert counts["zz-real"] == (1, 1)  # a queue that exists: never lumped with others
    assert counts[INTAKE_OTHER] == (50, 0)
    assert len(counts) == INTAKE_OTHER_NAMES + 2
    assert all(len(name) <= 100 for name in counts)
    assert sum(p for p, _ in counts.values()) == len(names) + 1


async def test_a_long_id_or_queue_name_is_read_cut_and_rejected(
        store: Store, db_url: str, backend: str, clock: FakeClock) -> None:
    """The size bound covers data and fields; a job id or a queue name is read cut
    just past what a valid one may hold (200 and 100 characters), which keeps the
    verdict (an invalid id, an unknown queue) and bounds the read."""
    service = Hipq(store, clock=clock)
    await service.create_queue(QueueConfig(id="q"))
    await owner_rows(db_url, backend, [
        {"queue": "q", "job_id": "i" * 100_000},
        {"queue": "n" * 50_000, "job_id": "x" * 50_000},
        {"queue": "q", "job_id": "fine"}])
    rows = await store.intake_pending(queues=["q"], limit=10)
    assert [len(r.job_id or "") for r in rows] == [201, 4]
    later = datetime(2100, 1, 1, tzinfo=UTC)
    [orphan] = await store.intake_orphans(known=["q"], before=later, limit=10)
    assert (len(orphan.queue), len(orphan.job_id or "")) == (101, 201)
    ingest = Intake(service, store, clock)
    await ingest.ingest({"q"}, {"q"})
    rejected = await store.intake_rejected_page(limit=10)
    assert [r.error[:10] for r in rejected if r.error] == ["invalid id"]
    assert await store.job_get("q", "fine") is not None

"""``hipq.sql``: enqueue in the producer's own transaction (docs/from-your-database.md), through
every connection kind on PostgreSQL and the SQLAlchemy kinds on SQLite. Rows are read
back through ``hipq.store.schema.job_intake`` on a connection of its own, so what
a test sees is what another session sees after the producer's commit."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import asyncpg
import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session, scoped_session, sessionmaker
from sqlalchemy.pool import NullPool

from hipq import sql
from hipq.bodies import EnqueueRequest
from hipq.store import schema as s
from hipq.store.notify import CHANNEL, INTAKE

pytestmark = pytest.mark.sql_only  # hipq.sql writes into a database

Q = "emails"
PG_KINDS = ["sa_connection", "sa_session", "sa_async_connection", "sa_async_session",
            "asyncpg", "psycopg", "psycopg_async"]
SQLITE_KINDS = PG_KINDS[:4]  # the SQLAlchemy kinds
CASES = [("postgresql", k) for k in PG_KINDS] + [("sqlite", k) for k in SQLITE_KINDS]
every_kind = pytest.mark.parametrize(("backend", "kind"), CASES, indirect=["backend"],
                                     ids=[f"{b}-{k}" for b, k in CASES])
postgres_kinds = pytest.mark.parametrize(("backend", "kind"),
                                         [("postgresql", k) for k in PG_KINDS],
                                         indirect=["backend"], ids=PG_KINDS)
on_postgres = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


# --- one open transaction of each kind, driven from async tests ------------------------

async def _maybe(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) else value


@dataclass
class Tx:
    conn: Any
    is_async: bool
    insert_order: Callable[[str], Any]
    commit: Callable[[], Any]
    rollback: Callable[[], Any]

    async def enqueue(self, *args: Any, **kwargs: Any) -> None:
        result = sql.enqueue(self.conn, *args, **kwargs)
        if self.is_async:
            assert asyncio.iscoroutine(result)
            result = await result
        assert result is None

    async def enqueue_many(self, queue: str, jobs: Any) -> int:
        result = sql.enqueue_many(self.conn, queue, jobs)
        if self.is_async:
            assert asyncio.iscoroutine(result)
            result = await result
        assert isinstance(result, int)
        return result

    async def order(self, order_id: str) -> None:
        await _maybe(self.insert_order(order_id))

    async def done(self, *, commit: bool) -> None:
        await _maybe(self.commit() if commit else self.rollback())


def _url(db_url: str, driver: str) -> str:
    """``db_url`` (``sqlite+aiosqlite`` or ``postgresql+asyncpg``) with another driver."""
    scheme, rest = db_url.split("://", 1)
    base = scheme.split("+", 1)[0]
    return f"{base}{'+' + driver if driver else ''}://{rest}"


ORDER_SA = sa.text("INSERT INTO orders (id) VALUES (:id)")


@contextlib.asynccontextmanager
async def sqlalchemy_sync(db_url: str, *, session: bool) -> AsyncIterator[Tx]:
    driver = "psycopg" if db_url.startswith("postgresql") else ""
    engine = sa.create_engine(_url(db_url, driver), poolclass=NullPool)
    conn: Any = Session(engine) if session else engine.connect()
    try:
        yield Tx(conn, False, lambda oid: conn.execute(ORDER_SA, {"id": oid}),
                 conn.commit, conn.rollback)
    finally:
        conn.close()
        engine.dispose()


@contextlib.asynccontextmanager
async def sqlalchemy_async(db_url: str, *, session: bool) -> AsyncIterator[Tx]:
    engine = create_async_engine(db_url, poolclass=NullPool)
    conn: Any = AsyncSession(engine) if session else await engine.connect()
    try:
        yield Tx(conn, True, lambda oid: conn.execute(ORDER_SA, {"id": oid}),
                 conn.commit, conn.rollback)
    finally:
        await conn.close()
        await engine.dispose()


@contextlib.asynccontextmanager
async def asyncpg_tx(db_url: str) -> AsyncIterator[Tx]:
    conn = await asyncpg.connect(_url(db_url, ""))
    tr = conn.transaction()
    await tr.start()
    try:
        yield Tx(conn, True, lambda oid: conn.execute("INSERT INTO orders (id) VALUES ($1)", oid),
                 tr.commit, tr.rollback)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def psycopg_tx(db_url: str) -> AsyncIterator[Tx]:
    conn = psycopg.connect(_url(db_url, ""))  # not autocommit: the first statement begins
    try:
        yield Tx(conn, False,
                 lambda oid: conn.execute("INSERT INTO orders (id) VALUES (%s)", (oid,)),
                 conn.commit, conn.rollback)
    finally:
        conn.close()


@contextlib.asynccontextmanager
async def psycopg_async_tx(db_url: str) -> AsyncIterator[Tx]:
    conn = await psycopg.AsyncConnection.connect(_url(db_url, ""))
    try:
        yield Tx(conn, True,
                 lambda oid: conn.execute("INSERT INTO orders (id) VALUES (%s)", (oid,)),
                 conn.commit, conn.rollback)
    finally:
        await conn.close()


def open_tx(kind: str, db_url: str) -> contextlib.AbstractAsyncContextManager[Tx]:
    return {
        "sa_connection": lambda: sqlalchemy_sync(db_url, session=False),
        "sa_session": lambda: sqlalchemy_sync(db_url, session=True),
        "sa_async_connection": lambda: sqlalchemy_async(db_url, session=False),
        "sa_async_session": lambda: sqlalchemy_async(db_url, session=True),
        "asyncpg": lambda: asyncpg_tx(db_url),
        "psycopg": lambda: psycopg_tx(db_url),
        "psycopg_async": lambda: psycopg_async_tx(db_url),
    }[kind]()


async def read(db_url: str, statement: sa.Executable) -> list[Any]:
    engine = create_async_engine(db_url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return list((await conn.execute(statement)).all())
    finally:
        await engine.dispose()


async def intake(db_url: str) -> list[Any]:
    return await read(db_url, sa.select(s.job_intake).order_by(s.job_intake.c.id))


async def orders(db_url: str) -> list[str]:
    return [r.id for r in await read(db_url, sa.text("SELECT id FROM orders ORDER BY id"))]


@pytest.fixture
async def with_orders(db_url: str) -> str:
    """``db_url`` with the producer's own table, ``orders``."""
    engine = create_async_engine(db_url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE orders (id TEXT PRIMARY KEY)"))
    finally:
        await engine.dispose()
    return db_url


# --- every kind, both databases --------------------------------------------------------

@every_kind
async def test_a_committed_transaction_leaves_its_jobs_in_the_intake(kind: str,
                                                                    db_url: str) -> None:
    plus_two = timezone(timedelta(hours=2))
    run_after = datetime(2030, 1, 2, 5, 4, 5, 678000, tzinfo=plus_two)
    data = {"to": "a@example.com", "n": [1, 2.5, None, True, 2**62], "ü": "✓ \\u0000"}
    windows = [{"days": ["mon"], "start": "09:00", "end": "17:00"}]
    before = datetime.now(UTC) - timedelta(seconds=5)  # PostgreSQL's now(): its clock
    async with open_tx(kind, db_url) as tx:
        await tx.enqueue(Q, "j1", data, run_after=run_after, priority=5, critical=True,
                         expires_at=datetime(2030, 1, 3, 1, tzinfo=plus_two),
                         time_windows=windows, ordering_key="k")
        await tx.enqueue(Q, "j2")
        jobs = [{"id": "m1", "data": {"i": 1}, "run_after": "2030-01-02T03:04:05Z",
                 "weight": 3}, ("m2", {"i": 2}), ("m3", None)]
        assert await tx.enqueue_many("other", jobs) == 3
        assert await tx.enqueue_many("other", []) == 0
        await tx.done(commit=True)
    rows = await intake(db_url)
    assert [(r.queue, r.job_id, r.data, r.run_after, r.fields) for r in rows] == [
        (Q, "j1", data, run_after,
         {"priority": 5, "critical": True, "expires_at": "2030-01-02T23:00:00+00:00",
          "time_windows": windows, "ordering_key": "k"}),
        (Q, "j2", {}, None, {}),
        ("other", "m1", {"i": 1}, datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC), {"weight": 3}),
        ("other", "m2", {"i": 2}, None, {}),
        ("other", "m3", {}, None, {}),
    ]
    assert all(r.error is None and r.rejected_at is None for r in rows)
    assert all(before < r.enqueued_at < datetime.now(UTC) + timedelta(seconds=5) for r in rows)


@every_kind
async def test_a_rolled_back_transaction_leaves_nothing(kind: str, db_url: str) -> None:
    async with open_tx(kind, db_url) as tx:
        await tx.enqueue(Q, "j1", {"a": 1})
        await tx.enqueue_many(Q, [("j2", {}), ("j3", {})])
        await tx.done(commit=False)
    assert await intake(db_url) == []


@every_kind
async def test_the_callers_row_and_its_job_commit_together(kind: str, with_orders: str) -> None:
    async with open_tx(kind, with_orders) as tx:
        await tx.order("o-1")
        await tx.enqueue("invoices", "o-1", {"order": "o-1"})
        await tx.done(commit=True)
    async with open_tx(kind, with_orders) as tx:
        await tx.order("o-2")
        await tx.enqueue("invoices", "o-2", {"order": "o-2"})
        await tx.done(commit=False)
    assert await orders(with_orders) == ["o-1"]
    assert [(r.job_id, r.data) for r in await intake(with_orders)] == [("o-1", {"order": "o-1"})]


@every_kind
async def test_bad_input_raises_before_anything_is_written(kind: str, with_orders: str) -> None:
    """Checked before a statement is made (even for async kinds, nothing to await):
    the transaction is as it was, and goes on."""
    async with open_tx(kind, with_orders) as tx:
        await tx.order("o-1")
        jobs = [("a", {}), ("b", {}), ("c", {"x": float("nan")})]
        with pytest.raises(ValueError, match=r"jobs\[2\]: data is not JSON"):
            sql.enqueue_many(tx.conn, Q, jobs)
        with pytest.raises(ValueError, match="holds a NUL"):
            sql.enqueue(tx.conn, Q, "j", {"text": "a\x00b"})
        with pytest.raises(TypeError, match="unknown enqueue field"):
            sql.enqueue(tx.conn, Q, "j", {}, prio=1)
        await tx.enqueue(Q, "fine")
        await tx.done(commit=True)
    assert await orders(with_orders) == ["o-1"]
    assert [r.job_id for r in await intake(with_orders)] == ["fine"]


# --- PostgreSQL: speed and notifications -----------------------------------------------

@postgres_kinds
async def test_ten_thousand_jobs_in_one_transaction(kind: str, db_url: str) -> None:
    jobs = [{"id": f"job-{i:05d}", "data": {"i": i, "to": f"user{i}@example.com"},
             "priority": i % 7} for i in range(10_000)]
    async with open_tx(kind, db_url) as tx:
        started = time.perf_counter()
        assert await tx.enqueue_many(Q, jobs) == 10_000
        elapsed = time.perf_counter() - started
        await tx.done(commit=True)
    print(f"\nenqueue_many of 10,000 jobs ({kind}): {elapsed * 1000:.0f} ms")  # noqa: T201 (the timing, shown with -s)
    rows = await intake(db_url)
    assert [(r.job_id, r.data, r.fields) for r in rows] == [
        (j["id"], j["data"], {"priority": j["priority"]}) for j in jobs]  # in order


class Listener:
    """A LISTEN on ``hipq_wake`` on a connection of its own."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.payloads: asyncio.Queue[str] = asyncio.Queue()

    @classmethod
    @contextlib.asynccontextmanager
    async def on(cls, db_url: str) -> AsyncIterator[Listener]:
        listener = cls(await asyncpg.connect(_url(db_url, "")))
        await listener.conn.add_listener(CHANNEL, listener._heard)
        try:
            yield listener
        finally:
            await listener.conn.close()

    def _heard(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        self.payloads.put_nowait(payload)

    async def nothing_yet(self) -> bool:
        await self.conn.fetchval("SELECT 1")  # a round trip: what was sent has come
        return self.payloads.empty()

    async def next(self) -> str:
        return await asyncio.wait_for(self.payloads.get(), 5)

    async def only(self, payload: str) -> None:
        """``payload`` comes, then nothing else: a marker sent after it comes next."""
        assert await self.next() == payload
        await self.conn.execute(f"NOTIFY {CHANNEL}, 'marker'")
        assert await self.next() == "marker"


@on_postgres
async def test_hipq_enqueue_from_plain_sql_notifies_at_commit(db_url: str) -> None:
    async with Listener.on(db_url) as listener:
        producer = await asyncpg.connect(_url(db_url, ""))
        try:
            async with producer.transaction():
                await producer.execute("""SELECT hipq_enqueue('q', 'j1', '{"a":1}')""")
                await producer.execute("SELECT hipq_enqueue('q', 'j2')")
                assert await intake(db_url) == []  # not yet visible to others
                assert await listener.nothing_yet()
        finally:
            await producer.close()
        await listener.only(INTAKE)
    rows = await intake(db_url)
    assert [(r.queue, r.job_id, r.data, r.run_after, r.fields, r.error) for r in rows] == [
        ("q", "j1", {"a": 1}, None, {}, None), ("q", "j2", {}, None, {}, None)]


@postgres_kinds
async def test_the_helpers_notify_once_at_commit(kind: str, db_url: str) -> None:
    async with Listener.on(db_url) as listener:
        async with open_tx(kind, db_url) as tx:
            await tx.enqueue(Q, "j1")
            await tx.enqueue_many(Q, [("j2", {}), ("j3", {})])
            assert await listener.nothing_yet()
            await tx.done(commit=True)
        await listener.only(INTAKE)


@on_postgres
async def test_an_asyncpg_pool_connection_works(db_url: str) -> None:
    pool = await asyncpg.create_pool(_url(db_url, ""), min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn, conn.transaction():
            assert await sql.enqueue_many(conn, Q, [("j1", {})]) == 1
    finally:
        await pool.close()
    assert [r.job_id for r in await intake(db_url)] == ["j1"]


# --- the checks at the door (no database needed beyond an in-memory SQLite) ------------

@pytest.fixture
def memory() -> Any:
    engine = sa.create_engine("sqlite://")
    with engine.connect() as conn:
        s.job_intake.create(conn)
        s.meta.create(conn)  # the intake's limit is read there
        yield conn
    engine.dispose()


def _count(conn: Any) -> int:
    return int(conn.execute(sa.text("SELECT count(*) FROM job_intake")).scalar_one())


AWARE = datetime(2030, 1, 1, tzinfo=UTC)
BAD_CALLS = [
    ({"queue": ""}, ValueError, "queue must not be empty"),
    ({"queue": 7}, TypeError, "queue must be a str"),
    ({"id": ""}, ValueError, "id must not be empty"),
    ({"id": None}, TypeError, "id must be a str"),
    ({"id": "a\x00"}, ValueError, "id holds a NUL"),
    ({"id": "\ud800"}, ValueError, "id holds a lone surrogate"),
    ({"data": [1]}, TypeError, "data must be a dict"),
    ({"data": {"x": float("inf")}}, ValueError, "data is not JSON"),
    ({"data": {"x": object()}}, TypeError, "data is not JSON"),
    ({"data": {"x": AWARE}}, TypeError, "data is not JSON"),
    ({"data": {"x": "\ud800"}}, ValueError, "data holds a lone surrogate"),
    ({"data": {"k\x00": 1}}, ValueError, "data holds a NUL"),
    ({"run_after": "tomorrow"}, ValueError, "run_after is not an ISO 8601 time"),
    ({"run_after": "2030-01-01T00:00:00"}, ValueError, "run_after has no time zone"),
    ({"run_after": datetime(2030, 1, 1)}, ValueError, "run_after has no time zone"),
    ({"run_after": 1893456000}, TypeError, "run_after must be a datetime"),
    ({"priority": 1, "delay": 5}, TypeError, r"unknown enqueue field\(s\) \['delay'\]"),
    ({"expires_at": datetime(2030, 1, 1)}, ValueError, "fields is not JSON.*no time zone"),
    ({"time_windows": {1, 2}}, TypeError, "fields is not JSON"),
]


@pytest.mark.parametrize(("given", "error", "match"), BAD_CALLS)
def test_bad_input_is_refused_with_a_clear_message(memory: Any, given: dict[str, Any],
                                                   error: type[Exception], match: str) -> None:
    call = {"queue": Q, "id": "j", **given}
    with pytest.raises(error, match=match):
        sql.enqueue(memory, call.pop("queue"), call.pop("id"), **call)
    item = {"id": "j", **{k: v for k, v in given.items() if k != "queue"}}
    with pytest.raises(error, match=rf"jobs\[1\]: {match}" if "queue" not in given else match):
        sql.enqueue_many(memory, given.get("queue", Q), [("ok", {}), item])
    assert _count(memory) == 0


@pytest.mark.parametrize(("job", "match"), [
    ({"data": {}}, r"jobs\[0\]: a job needs an 'id'"),
    (("a", {}, 1), r"jobs\[0\]: a job tuple is \(id, data\)"),
    ("a", r"jobs\[0\]: a job is a mapping or an \(id, data\) tuple"),
])
def test_a_job_of_enqueue_many_is_a_mapping_with_an_id_or_a_pair(memory: Any, job: Any,
                                                                 match: str) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        sql.enqueue_many(memory, Q, [job])


def test_a_nul_escape_is_refused_but_a_backslash_before_u0000_is_text(memory: Any) -> None:
    sql.enqueue(memory, Q, "j", {"x": "\\u0000", "y": "\\\\u0000"})
    with pytest.raises(ValueError, match="holds a NUL"):
        sql.enqueue(memory, Q, "k", {"x": "\\\x00"})
    assert _count(memory) == 1


def test_something_else_than_a_connection_is_refused() -> None:
    with pytest.raises(TypeError, match=r"hipq\.sql takes a SQLAlchemy Connection"):
        sql.enqueue(object(), Q, "j")
    engine = sa.create_engine("sqlite://")
    try:
        with pytest.raises(TypeError, match=r"not sqlalchemy\.engine\.base\.Engine"):
            sql.enqueue_many(engine, Q, [("j", {})])  # an engine has no transaction
    finally:
        engine.dispose()


def test_a_scoped_session_uses_its_current_session(tmp_path: Any) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/x.db")
    s.job_intake.create(engine)
    s.meta.create(engine)
    registry = scoped_session(sessionmaker(engine))
    try:
        assert sql.enqueue_many(registry, Q, [("j1", {"a": 1})]) == 1
        registry.commit()
        with engine.connect() as conn:
            assert _count(conn) == 1
    finally:
        registry.remove()
        engine.dispose()


def test_the_fields_are_those_of_an_enqueue_and_the_wake_is_hipq_enqueues() -> None:
    assert sql.ENQUEUE_FIELDS | {"data", "run_after"} == set(EnqueueRequest.model_fields)
    assert (sql.CHANNEL, sql.PAYLOAD) == (CHANNEL, INTAKE)
    assert f"pg_notify('{CHANNEL}', '{INTAKE}')" in s.enqueue_function()


def test_importing_hipq_sql_loads_no_database_library() -> None:
    code = ("import sys, hipq.sql; print(sorted({m.partition('.')[0] for m in sys.modules}"
            " & {'sqlalchemy', 'asyncpg', 'psycopg', 'aiosqlite', 'pydantic'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    assert out == "[]"

"""A producer role on PostgreSQL needs EXECUTE on ``hipq_enqueue()`` (and
``hipq_enqueue_many()`` for :mod:`hipq.sql`) and nothing else
(docs/from-your-database.md, "Grants"): the functions are ``SECURITY DEFINER`` with a
fixed ``search_path``; they refuse at once, in the caller's transaction, a row whose
data and fields are over the stored limit (``api.max_body_bytes``) or whose
``run_after`` is not a finite time; the role can neither write the intake table
(nor a row's error or rejection time) nor read it. A role without the grant cannot
enqueue at all."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg  # type: ignore[import-untyped]
import pytest

from hipq import sql
from hipq.store import Store, open_store

LIMIT = 10_000  # the intake's limit stored for these tests
ENQUEUE = "hipq_enqueue(text, text, jsonb, timestamptz, jsonb)"
ENQUEUE_MANY = "hipq_enqueue_many(text, jsonb)"

_numbers = itertools.count()


on_postgres = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


def _plain(db_url: str) -> str:
    return db_url.replace("postgresql+asyncpg://", "postgresql://", 1)


@pytest.fixture
async def owner(db_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection as the database's owner (the role hipq runs as)."""
    conn = await asyncpg.connect(_plain(db_url))
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def role(db_url: str, owner: asyncpg.Connection
               ) -> AsyncIterator[Callable[..., Awaitable[asyncpg.Connection]]]:
    """``await role(*grants)``: a connection as a new login role given these grants
    (SQL after ``GRANT``, ``TO <role>`` added); the role is dropped afterwards."""
    made: list[tuple[str, asyncpg.Connection]] = []

    async def make(*grants: str) -> asyncpg.Connection:
        name = f"producer_{os.getpid()}_{next(_numbers)}"
        await owner.execute(f"CREATE ROLE {name} LOGIN")
        for grant in grants:
            await owner.execute(f"GRANT {grant} TO {name}")
        _user, _, host = _plain(db_url).partition("://")[2].partition("@")
        conn = await asyncpg.connect(f"postgresql://{name}@{host}")
        made.append((name, conn))
        return conn

    try:
        yield make
    finally:
        for name, conn in made:
            await conn.close()
            await owner.execute(f"DROP OWNED BY {name}")
            await owner.execute(f"DROP ROLE {name}")


@pytest.fixture
async def limited(db_url: str) -> AsyncIterator[Store]:
    """The store, with the intake's limit set to :data:`LIMIT` (as a daemon with
    ``api.max_body_bytes: 10000`` stores it at start)."""
    store = await open_store(db_url)
    try:
        await store.intake_limit_set(LIMIT)
        yield store
    finally:
        await store.close()


async def _rows(owner: asyncpg.Connection) -> list[tuple[str, str | None, str | None]]:
    return [(r["job_id"], r["error"], r["rejected_at"]) for r in await owner.fetch(
        "SELECT job_id, error, rejected_at::text FROM job_intake ORDER BY id")]


@on_postgres
async def test_a_role_with_only_execute_enqueues_and_can_touch_nothing_else(
        role: Callable[..., Awaitable[asyncpg.Connection]], owner: asyncpg.Connection,
        limited: Store) -> None:
    producer = await role(f"EXECUTE ON FUNCTION {ENQUEUE}")
    async with producer.transaction():
        await producer.execute("""SELECT hipq_enqueue('q', 'ok', '{"a": 1}')""")
    assert await _rows(owner) == [("ok", None, None)]

    for statement in (
            "INSERT INTO job_intake (queue, job_id, data, fields, enqueued_at, error, "
            "rejected_at) VALUES ('q', 'x', '{}', '{}', now(), 'pinned', '9999-12-31')",
            "UPDATE job_intake SET error = 'x', rejected_at = '9999-12-31'",
            "DELETE FROM job_intake",
            "SELECT * FROM job_intake",
            "UPDATE hipq_meta SET value = '999999999' WHERE key = 'intake_max_bytes'",
            "SELECT * FROM jobs"):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await producer.execute(statement)
    assert await _rows(owner) == [("ok", None, None)]


@on_postgres
async def test_an_oversized_row_or_a_non_finite_time_raises_in_the_callers_transaction(
        role: Callable[..., Awaitable[asyncpg.Connection]], owner: asyncpg.Connection,
        limited: Store) -> None:
    producer = await role(f"EXECUTE ON FUNCTION {ENQUEUE}")
    big = '{"pad": "%s"}' % ("x" * 100_000)
    calls = [
        (f"SELECT hipq_enqueue('q', 'big', '{big}')", asyncpg.ProgramLimitExceededError),
        (f"""SELECT hipq_enqueue('q', 'big-fields', '{{}}', NULL,
             '{{"ordering_key": "{"k" * 20_000}"}}')""", asyncpg.ProgramLimitExceededError),
        ("SELECT hipq_enqueue('q', 'inf', '{}', 'infinity')", asyncpg.DatetimeFieldOverflowError),
        ("SELECT hipq_enqueue('q', 'neg', '{}', '-infinity')", asyncpg.DatetimeFieldOverflowError),
        ("SELECT hipq_enqueue('q', 'far', '{}', '20000-01-01')",
         asyncpg.DatetimeFieldOverflowError),
    ]
    for call, error in calls:
        transaction = producer.transaction()
        await transaction.start()
        await producer.execute("""SELECT hipq_enqueue('q', 'before', '{}')""")
        with pytest.raises(error) as raised:
            await producer.execute(call)
        await transaction.rollback()  # the caller's transaction is aborted: its rows go too
        message = str(raised.value)
        assert "hipq_enqueue" in message
        if error is asyncpg.ProgramLimitExceededError:
            assert f"limit of {LIMIT} bytes" in message
    async with producer.transaction():
        await producer.execute(  # just under the limit: taken
            """SELECT hipq_enqueue('q', 'fits', '{"pad": "%s"}')""" % ("x" * (LIMIT - 20)))
        await producer.execute("SELECT hipq_enqueue('q', 'soon', '{}', '2030-01-01')")
    assert [job_id for job_id, _, _ in await _rows(owner)] == ["fits", "soon"]


@on_postgres
async def test_hipq_sql_as_a_producer_role_goes_through_the_functions(
        role: Callable[..., Awaitable[asyncpg.Connection]], owner: asyncpg.Connection,
        limited: Store) -> None:
    producer = await role(f"EXECUTE ON FUNCTION {ENQUEUE}", f"EXECUTE ON FUNCTION {ENQUEUE_MANY}")
    async with producer.transaction():
        await sql.enqueue(producer, "q", "one", {"a": 1}, priority=2)
        assert await sql.enqueue_many(producer, "q", [("two", None), {"id": "three"}]) == 2
    assert [job_id for job_id, _, _ in await _rows(owner)] == ["one", "two", "three"]
    with pytest.raises(asyncpg.ProgramLimitExceededError, match=r"jobs\[1\]"):
        async with producer.transaction():
            await sql.enqueue_many(producer, "q", [("small", None),
                                                   ("big", {"pad": "x" * 20_000})])
    assert len(await _rows(owner)) == 3  # nothing of the refused call


@on_postgres
async def test_a_role_without_the_grant_cannot_enqueue(
        role: Callable[..., Awaitable[asyncpg.Connection]], owner: asyncpg.Connection) -> None:
    stranger = await role()
    for call in ("SELECT hipq_enqueue('q', 'x')", "SELECT hipq_enqueue_many('q', '[]')"):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="function hipq_enqueue"):
            await stranger.execute(call)
    assert await _rows(owner) == []


@on_postgres
async def test_the_callers_search_path_cannot_redirect_the_functions(
        role: Callable[..., Awaitable[asyncpg.Connection]], owner: asyncpg.Connection,
        limited: Store) -> None:
    """The functions run with their own search_path: a temporary table, or a function
    named like one they call, made by the caller changes nothing."""
    producer = await role(f"EXECUTE ON FUNCTION {ENQUEUE}", "TEMPORARY ON DATABASE "
                          + await owner.fetchval("SELECT current_database()"))
    await producer.execute("CREATE TEMPORARY TABLE job_intake (LIKE pg_class)")
    await producer.execute("CREATE TEMPORARY TABLE hipq_meta (key text, value text)")
    await producer.execute("INSERT INTO hipq_meta VALUES ('intake_max_bytes', '999999999')")
    await producer.execute("SET search_path = pg_temp, public")
    with pytest.raises(asyncpg.ProgramLimitExceededError):
        await producer.execute(
            """SELECT hipq_enqueue('q', 'big', '{"pad": "%s"}')""" % ("x" * 20_000))
    await producer.execute("SELECT hipq_enqueue('q', 'landed')")
    assert await _rows(owner) == [("landed", None, None)]


@on_postgres
async def test_migrate_keeps_the_functions_closed_to_public(owner: asyncpg.Connection) -> None:
    for function in (ENQUEUE, ENQUEUE_MANY):
        row = await owner.fetchrow(
            "SELECT p.prosecdef, p.proconfig, has_function_privilege('public', p.oid, "
            "'EXECUTE') AS public FROM pg_proc p WHERE p.oid = $1::regprocedure", function)
        assert row["prosecdef"], function
        assert not row["public"], function
        assert any(c.startswith("search_path=pg_catalog, ") and c.endswith(", pg_temp")
                   for c in row["proconfig"]), row["proconfig"]

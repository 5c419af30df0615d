"""The PostgreSQL driver's pool (hipq.store.pg_pool), which replaced SQLAlchemy's: at
most ``pool_size`` connections, opened on demand; JSON read back as Python values;
a connection checked in as it is (no reset statement, so no round trip); a checkout
that finds no free connection in time fails as TransientStoreError; closing leaves
no connection open."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from hipq.errors import TransientStoreError
from hipq.store import open_store, pg_pool
from hipq.store.postgres import PostgresStore

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)


async def _connections(url: str) -> int:
    admin = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        count: int = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()")
        return count
    finally:
        await admin.close()


async def test_at_most_pool_size_connections_opened_on_demand(db_url: str) -> None:
    store = await open_store(db_url, pool_size=2)
    assert isinstance(store, PostgresStore)
    try:
        assert await _connections(db_url) == 0  # none at start
        await asyncio.gather(*(store.queue_list() for _ in range(10)))
        assert await _connections(db_url) <= 2
        assert store.checked_out() == 0
    finally:
        await store.close()
    assert await _connections(db_url) == 0


async def test_json_comes_back_as_python_values(db_url: str) -> None:
    store = await open_store(db_url, pool_size=1)
    assert isinstance(store, PostgresStore)
    try:
        async with pg_pool.checkout(store.pool) as db:
            value = await db.fetchval("SELECT $1::jsonb", '{"a": [1, 2.5, null]}')
            plain = await db.fetchval("SELECT $1::json", '{"b": "c"}')
        assert value == {"a": [1, 2.5, None]}
        assert plain == {"b": "c"}
    finally:
        await store.close()


async def test_a_connection_is_checked_in_as_it_is(db_url: str) -> None:
    """No RESET ALL on the way back (a check-in costs no round trip): what a session
    set stays, as it did with SQLAlchemy's pool; an open transaction is rolled back."""
    store = await open_store(db_url, pool_size=1)
    assert isinstance(store, PostgresStore)
    try:
        async with pg_pool.checkout(store.pool) as db:
            await db.execute("SET application_name = 'kept'")
            pid = await db.fetchval("SELECT pg_backend_pid()")
        async with pg_pool.checkout(store.pool) as db:
            assert await db.fetchval("SELECT pg_backend_pid()") == pid
            assert await db.fetchval("SHOW application_name") == "kept"
    finally:
        await store.close()


async def test_no_free_connection_in_time_is_transient(db_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg_pool, "CHECKOUT_SECONDS", 0.2)
    store = await open_store(db_url, pool_size=1)
    assert isinstance(store, PostgresStore)
    try:
        async with pg_pool.checkout(store.pool):
            with pytest.raises(TransientStoreError, match="no database connection"):
                await store.queue_list()
        assert await store.queue_list() == []  # the pool is fine afterwards
    finally:
        await store.close()


async def test_a_bad_url_is_refused_at_open(db_url: str) -> None:
    from hipq.errors import StoreError

    with pytest.raises(StoreError, match="bad database URL"):
        await open_store(db_url.replace("@", "@h:notaport,", 1))


async def test_query_loggers_see_every_statement_until_removed(db_url: str) -> None:
    """How tools and tests see the statements (bench/tick_scaling.py, the plan tests):
    on the connections the pool has and those it opens later."""
    store = await open_store(db_url, pool_size=2)
    assert isinstance(store, PostgresStore)
    seen: list[str] = []

    def record(query: Any) -> None:
        seen.append(query.query)

    try:
        await store.queue_list()  # one connection opened before the logger
        store.add_query_logger(record)
        await asyncio.gather(*(store.queue_list() for _ in range(4)))  # and a second one
        await asyncio.sleep(0)  # asyncpg calls loggers soon after the statement
        assert len(seen) == 4
        assert all("FROM queues" in q for q in seen)
        store.remove_query_logger(record)
        await store.queue_list()
        await asyncio.sleep(0)
        assert len(seen) == 4
    finally:
        await store.close()

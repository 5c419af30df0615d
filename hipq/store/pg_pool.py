"""The PostgreSQL driver's connection pool: an :class:`asyncpg.Pool` set up as the
SQLAlchemy pool it replaces was (no SQLAlchemy is imported; it cost the daemon about
23 MB of memory).

* ``pool_size`` connections at most, opened on demand (none at start), kept open
  while idle (no idle timeout, no recycling after a number of queries), reused most
  recently released first;
* a connection attempt times out after 10 s; a checkout waits at most 30 s for a free
  connection, then fails as :class:`~hipq.errors.TransientStoreError`;
* ``json`` and ``jsonb`` values are read as Python values and written as JSON text,
  with the codecs SQLAlchemy's asyncpg dialect installed (binary format);
  ``timestamptz`` values as asyncpg reads and writes them, the instants read
  recently kept (:mod:`hipq.store.pg_time`);
* each connection plans every statement for its tables as they are when it runs
  (``plan_cache_mode = force_custom_plan``), unless the URL names another
  ``plan_cache_mode``: a prepared statement's generic plan is made once, from the
  tables' sizes then, and kept. Made while a table was empty and just vacuumed or
  analysed (hipq's own ``VACUUM`` of ``jobs`` after a burst, autovacuum after the
  inbox was pruned, an operator's ``ANALYZE``), it is a sequential scan, even one per
  row, kept after the table fills: one read of 2,000 new inbox rows took 970 ms, a
  scan of the inbox for each row; a claim planned during a trickle of work (one page
  of ``jobs``) scans the table for each job it claims. Each statement serves a whole
  batch, so planning it each time costs 0.05-1 ms a statement: about 0.015 ms of
  PostgreSQL CPU a job in the callback round trip, 0.003 in the in-tick lifecycle;
* a connection goes back to the pool as it is (rolled back only if a transaction was
  left open): no reset statement, so a checkout and a check-in cost no round trip.

No pre-ping (it would cost a round trip per checkout): a connection found dead
fails its statement (a TransientStoreError the caller retries), and the whole pool
is then renewed (``expire_connections``), so the next checkout after a database
restart gets a fresh connection. No overflow: under load a busy API waits for a
pooled connection rather than open (and TLS-probe, and re-prepare statements on) a
new one per request.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import asyncpg  # type: ignore[import-untyped]

from hipq.errors import TransientStoreError
from hipq.json_text import json_of
from hipq.store import pg_time
from hipq.store.pg_url import connect_options

CONNECT_SECONDS = 10.0  # one connection attempt (asyncpg.connect's timeout)
CHECKOUT_SECONDS = 30.0  # waiting for a free pooled connection
CLOSE_SECONDS = 10.0  # waiting for checked-out connections at close, then terminate
MAX_QUERIES = 2**62  # asyncpg closes a connection after this many queries: never
PLAN_EACH_RUN = "SET plan_cache_mode = force_custom_plan"  # see the module docstring


async def create_pool(url: str, *, pool_size: int, loggers: QueryLoggers) -> Any:
    """An initialized pool of at most ``pool_size`` connections to ``url`` (no
    connection is opened yet), each new one set up by ``loggers.init``.

    Raises:
        ValueError: the URL is not one asyncpg can use.
    """
    dsn, keywords = connect_options(url)
    plan_each_run = "plan_cache_mode" not in dict(parse_qsl(urlsplit(dsn).query))

    async def init(conn: Any) -> None:
        if plan_each_run:
            await conn.execute(PLAN_EACH_RUN)
        await loggers.init(conn)

    pool = asyncpg.create_pool(
        dsn, min_size=0, max_size=pool_size, max_queries=MAX_QUERIES,
        max_inactive_connection_lifetime=0, init=init, reset=_keep,
        timeout=CONNECT_SECONDS, **keywords)
    return await pool


def _jsonb_of(value: bytes) -> Any:
    return json_of(value[1:].decode())  # after jsonb's version byte


async def _set_codecs(conn: Any) -> None:
    """JSON values in and out, as SQLAlchemy's asyncpg dialect set them up; times as
    asyncpg makes them, the recent ones kept (:mod:`hipq.store.pg_time`)."""
    await pg_time.install(conn)
    await conn.set_type_codec("json", encoder=str.encode,
                              decoder=lambda value: json_of(value.decode()),
                              schema="pg_catalog", format="binary")
    await conn.set_type_codec("jsonb", encoder=lambda value: b"\x01" + value.encode(),
                              decoder=_jsonb_of, schema="pg_catalog", format="binary")


async def _keep(_conn: Any) -> None:
    """No reset statement at check-in (asyncpg still rolls back an open transaction)."""


@asynccontextmanager
async def checkout(pool: Any) -> AsyncIterator[Any]:
    """A pooled connection for the block, returned to the pool after it."""
    try:
        conn = await pool.acquire(timeout=CHECKOUT_SECONDS)
    except TimeoutError as exc:
        raise TransientStoreError(
            f"no database connection within {CHECKOUT_SECONDS:g} s (pool of "
            f"{pool.get_max_size()} in use, or the server does not answer)") from exc
    try:
        yield conn
    finally:
        await pool.release(conn)


class QueryLoggers:
    """asyncpg query loggers (``callback(LoggedQuery)``) on every connection of a
    pool, those it has and those it opens later, while they are registered: how a
    tool or a test sees each statement the store sends (its text, arguments and
    time). The pool calls :meth:`init` on each new connection; nothing is done at a
    checkout."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[Any], None]] = []
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()

    async def init(self, conn: Any) -> None:
        """A new connection: JSON codecs, then the registered loggers."""
        await _set_codecs(conn)
        self._connections.add(conn)
        for callback in self.callbacks:
            conn.add_query_logger(callback)

    def add(self, callback: Callable[[Any], None]) -> None:
        self.callbacks.append(callback)
        for conn in list(self._connections):
            conn.add_query_logger(callback)

    def remove(self, callback: Callable[[Any], None]) -> None:
        self.callbacks.remove(callback)
        for conn in list(self._connections):
            conn.remove_query_logger(callback)


def checked_out(pool: Any) -> int:
    """How many of the pool's connections are checked out now."""
    return int(pool.get_size() - pool.get_idle_size())


async def close(pool: Any) -> None:
    """Close the pool: wait a moment for checked-out connections, then terminate."""
    try:
        await asyncio.wait_for(pool.close(), CLOSE_SECONDS)
    except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        pool.terminate()

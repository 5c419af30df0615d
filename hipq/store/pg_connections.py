"""The connection half of the PostgreSQL driver (:mod:`hipq.store.postgres` holds the
statements): its asyncpg pool (:mod:`hipq.store.pg_pool`), asyncpg's errors
translated, checkouts, query loggers for tools, and a SQLAlchemy engine made only
when a tool or a test asks for one. No SQLAlchemy is imported otherwise."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import asyncpg  # type: ignore[import-untyped]

from hipq.store import pg_pool
from hipq.store.driver import DriverBase

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)


class PgConnections(DriverBase):
    """A driver's pooled connections to PostgreSQL (see the module docstring)."""

    # asyncpg's errors: the connection is gone or unusable (the pool is reset) ...
    _transient = (*DriverBase._transient, asyncpg.PostgresConnectionError,
                  asyncpg.InterfaceError, asyncpg.InternalClientError,
                  asyncpg.CannotConnectNowError, asyncpg.AdminShutdownError)
    # ... a constraint refused a write, or any other error of the server
    _conflicts = (asyncpg.IntegrityConstraintViolationError,)
    _errors = (asyncpg.PostgresError,)

    def __init__(self, pool: Any, *, url: str, pool_size: int,
                 loggers: pg_pool.QueryLoggers) -> None:
        super().__init__()
        self.pool = pool
        self.url = url  # as SQLAlchemy names it (postgresql+asyncpg://...)
        self.pool_size = pool_size
        self._loggers = loggers
        self._engine: AsyncEngine | None = None

    @property
    def engine(self) -> AsyncEngine:
        """A SQLAlchemy engine on the same database, made (and SQLAlchemy imported)
        on first use: for tools and tests that write SQLAlchemy Core against hipq's
        tables (:mod:`hipq.store.schema`). The store itself never uses it."""
        if self._engine is None:
            from sqlalchemy.ext.asyncio import create_async_engine

            self._engine = create_async_engine(self.url, pool_size=self.pool_size,
                                               max_overflow=0,
                                               connect_args={"timeout": 10})
        return self._engine

    def checked_out(self) -> int:
        return pg_pool.checked_out(self.pool)

    def add_query_logger(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback`` with asyncpg's ``LoggedQuery`` (text, arguments, time)
        after each statement the store sends, until removed (tools and tests)."""
        self._loggers.add(callback)

    def remove_query_logger(self, callback: Callable[[Any], None]) -> None:
        self._loggers.remove(callback)

    async def _drop_pool(self) -> None:
        """After a connection error: every pooled connection is replaced at its next
        checkout (a database restart may have left them all dead)."""
        try:
            await self.pool.expire_connections()
        except Exception:
            log.debug("could not reset the connection pool", exc_info=True)

    async def close(self) -> None:
        await pg_pool.close(self.pool)
        if self._engine is not None:
            await self._engine.dispose()

    @asynccontextmanager
    async def _driver(self, *, transaction: bool = False) -> AsyncIterator[Any]:
        """A pooled asyncpg connection, in a transaction of its own if
        ``transaction`` (else each statement commits on its own)."""
        async with self._translated(), pg_pool.checkout(self.pool) as db:
            if not transaction:
                yield db
                return
            async with db.transaction():
                yield db

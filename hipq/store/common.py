"""The half of a driver that runs on a SQLAlchemy engine (:mod:`hipq.store.sqlite`):
the engine and its pool, and SQLAlchemy's errors, on top of what every driver shares
(:class:`hipq.store.driver.DriverBase`, re-exported here with its names).

The PostgreSQL driver does not use it: it runs on an asyncpg pool and never imports
SQLAlchemy (:mod:`hipq.store.postgres`).
"""

from __future__ import annotations

import logging

from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from hipq.store.driver import VERSION_KEY, DriverBase, JobKey, QueueCounts

__all__ = ["VERSION_KEY", "DriverBase", "JobKey", "QueueCounts", "StoreBase"]

log = logging.getLogger(__name__)


class StoreBase(DriverBase):
    """A driver on a SQLAlchemy :class:`AsyncEngine` (``self.engine``)."""

    _transient = (OperationalError, OSError, ConnectionError)
    _conflicts = (IntegrityError,)
    _errors = (DBAPIError,)

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__()
        self.engine = engine

    def _connection_lost(self, exc: BaseException) -> bool:
        return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)

    async def _drop_pool(self) -> None:
        """After a connection error outside SQLAlchemy's sight (statements sent
        straight to the driver): start over with a new pool."""
        try:
            await self.engine.dispose(close=False)
        except Exception:
            log.debug("could not reset the connection pool", exc_info=True)

    async def close(self) -> None:
        await self.engine.dispose()

    def checked_out(self) -> int:
        checked: int = self.engine.pool.checkedout()  # type: ignore[attr-defined]
        return checked

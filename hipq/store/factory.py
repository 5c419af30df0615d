"""Opening a store: the one place that picks a driver by the database URL.

SQLite runs on SQLAlchemy (imported here only for a SQLite URL); PostgreSQL runs on
an asyncpg pool and loads no SQLAlchemy; ``memory://`` is a test double in plain
Python (:mod:`hipq.store.memory`).
"""

from __future__ import annotations

from hipq.errors import StoreError
from hipq.store.base import Store

DEFAULT_POOL_SIZE = 20  # PostgreSQL connections per process (SQLite: one writer)
MEMORY_URL = "memory://"  # a new store in memory at each open: tests only


def normalize_url(url: str) -> str:
    """Accept plain ``postgresql://`` / ``sqlite://`` URLs and add the async driver."""
    for plain, driver in (("postgresql://", "postgresql+asyncpg://"),
                          ("postgres://", "postgresql+asyncpg://"),
                          ("sqlite://", "sqlite+aiosqlite://")):
        if url.startswith(plain):
            return driver + url[len(plain):]
    return url


async def open_store(url: str, *, pool_size: int = DEFAULT_POOL_SIZE) -> Store:
    """Open a store on ``url`` (``pool_size``: PostgreSQL connections; SQLite has
    one writer); the caller runs ``migrate()`` or ``check_schema()``. ``memory://``
    opens a new, empty store in memory, for tests (:mod:`hipq.store.memory`).

    Raises:
        StoreError: the URL is malformed, names no supported database, or its
            driver is not installed.
    """
    url = normalize_url(url)
    if url.startswith("memory:"):
        return _open_memory(url)
    if url.startswith("sqlite"):
        return _open_sqlite(url)
    if url.startswith("postgresql+asyncpg://"):
        return await _open_postgres(url, pool_size)
    raise StoreError(f"unsupported database URL {url.split(':', 1)[0]!r}: "
                     "use sqlite+aiosqlite:///file.db or postgresql+asyncpg://...")


def _open_memory(url: str) -> Store:
    """A new, empty store in memory (:mod:`hipq.store.memory`): a test double, not
    for production (nothing survives the process, no other process sees it)."""
    if url != MEMORY_URL:
        raise StoreError(f"bad database URL: a store in memory is {MEMORY_URL!r}, no more")
    from hipq.store.memory import MemoryStore

    return MemoryStore()


def _open_sqlite(url: str) -> Store:
    try:
        import sqlalchemy as sa

        from hipq.store import sqlite
    except ImportError as exc:
        raise StoreError(f"database driver missing: {exc}") from None
    try:
        return sqlite.SQLiteStore(sqlite.create_engine(url))
    except sa.exc.ArgumentError as exc:
        raise StoreError(f"bad database URL: {exc}") from None
    except ImportError as exc:
        raise StoreError(f"database driver missing: {exc}") from None


async def _open_postgres(url: str, pool_size: int) -> Store:
    try:
        from hipq.store import postgres
    except ImportError as exc:
        raise StoreError(f"database driver missing: {exc}") from None
    try:
        return await postgres.create_store(url, pool_size=pool_size)
    except ValueError as exc:
        raise StoreError(f"bad database URL: {exc}") from None

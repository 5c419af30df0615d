"""Opening a store: the one place that picks a driver by the database URL."""

from __future__ import annotations

import sqlalchemy as sa

from hipq.config import DEFAULT_POOL_SIZE
from hipq.errors import StoreError
from hipq.store.base import Store


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
    one writer); the caller runs ``migrate()`` or ``check_schema()``.

    Raises:
        StoreError: the URL is malformed, names no supported database, or its
            driver is not installed.
    """
    url = normalize_url(url)
    try:
        if url.startswith("sqlite"):
            from hipq.store import sqlite
            return sqlite.SQLiteStore(sqlite.create_engine(url))
        if url.startswith("postgresql"):
            from hipq.store import postgres
            return postgres.PostgresStore(postgres.create_engine(url, pool_size=pool_size))
    except sa.exc.ArgumentError as exc:
        raise StoreError(f"bad database URL: {exc}") from None
    except ImportError as exc:
        raise StoreError(f"database driver missing: {exc}") from None
    raise StoreError(f"unsupported database URL {url.split(':', 1)[0]!r}: "
                     "use sqlite+aiosqlite:///file.db or postgresql+asyncpg://...")

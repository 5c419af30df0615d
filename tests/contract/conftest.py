"""Fixtures of the store contract tests beyond tests/conftest.py's."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg  # type: ignore[import-untyped]
import pytest


@pytest.fixture
async def raw(db_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain asyncpg connection to the test's PostgreSQL database (``db_url``), to
    read what the store wrote."""
    conn = await asyncpg.connect(db_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        yield conn
    finally:
        await conn.close()

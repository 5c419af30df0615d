"""Fixtures of the store contract tests beyond tests/conftest.py's.

The contract suite runs on each database and on the store in memory
(:mod:`hipq.store.memory`): ``backend`` is parametrized here over all three, except
for a test marked ``sql_only`` (it reads a SQL driver's rows, or checks its SQL:
plans, the schema, the pool), one that needs a database URL (``db_url``, ``raw``),
and one that names its backends itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg  # type: ignore[import-untyped]
import pytest

from tests.conftest import BACKENDS, MEMORY, backend_of, backends_for

CONTRACT_BACKENDS = [*BACKENDS, MEMORY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    backends_for(metafunc, CONTRACT_BACKENDS)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The store a contract test runs on (see the module docstring)."""
    return backend_of(request)


@pytest.fixture
async def raw(db_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A plain asyncpg connection to the test's PostgreSQL database (``db_url``), to
    read what the store wrote."""
    conn = await asyncpg.connect(db_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        yield conn
    finally:
        await conn.close()

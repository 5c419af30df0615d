"""Fixtures for the throttling suite (``store`` and ``clock`` come from
``tests/conftest.py``: a fresh store per test, in memory).

The throttler's tests run on the store in memory (:mod:`hipq.store.memory`), which
passes the drivers' conformance suite (``tests/contract``): that suite proves the
databases. A test marked ``sql_only``, or that needs a database URL, runs on SQLite
and PostgreSQL instead.
"""

from __future__ import annotations

import pytest

from hipq.store import Store
from hipq.testing import FakeClock
from tests.conftest import MEMORY, backend_of, backends_for
from tests.throttling._helpers import Harness


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    backends_for(metafunc, [MEMORY])


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The store a throttling test runs on (see the module docstring)."""
    return backend_of(request)


@pytest.fixture
def h(store: Store, clock: FakeClock) -> Harness:
    return Harness(store, clock)

"""Fixtures for the engine suite: a service, a memory target and a reconciler on
the store in memory (``store`` and ``clock`` come from ``tests/conftest.py``).

The engine's tests run on the store in memory (:mod:`hipq.store.memory`), which
passes the drivers' conformance suite (``tests/contract``): that suite proves the
databases. A test that reads a database's rows itself (``sql_only``: through
``store.engine``, or ``tests/engine/_helpers.py``'s ``inbox_outcomes`` and
``hot_jobs``), or needs a database URL, runs on SQLite and PostgreSQL instead.
"""

from __future__ import annotations

import pytest

from hipq.engine import Reconciler
from hipq.service import Hipq
from hipq.store import Store
from hipq.targets import Targets
from hipq.testing import FakeClock, MemoryTarget
from tests.conftest import MEMORY, backend_of, backends_for


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    backends_for(metafunc, [MEMORY])


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The store an engine test runs on (see the module docstring)."""
    return backend_of(request)


@pytest.fixture
def target() -> MemoryTarget:
    return MemoryTarget()


@pytest.fixture
def hipq(store: Store, clock: FakeClock) -> Hipq:
    return Hipq(store, clock=clock)


@pytest.fixture
def reconciler(store: Store, clock: FakeClock, target: MemoryTarget) -> Reconciler:
    return Reconciler(store, clock=clock, owner="o1", targets=Targets(memory={"t": target}))

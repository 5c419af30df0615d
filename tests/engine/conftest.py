"""Fixtures for the engine suite: a service, a memory target and a reconciler on
each database (``store`` and ``clock`` come from ``tests/conftest.py``)."""

from __future__ import annotations

import pytest

from hipq.reconciler import Reconciler
from hipq.service import Hipq
from hipq.store import Store
from hipq.testing import FakeClock, MemoryTarget


@pytest.fixture
def target() -> MemoryTarget:
    return MemoryTarget()


@pytest.fixture
def hipq(store: Store, clock: FakeClock) -> Hipq:
    return Hipq(store, clock=clock)


@pytest.fixture
def reconciler(store: Store, clock: FakeClock, target: MemoryTarget) -> Reconciler:
    return Reconciler(store, clock=clock, owner="o1", memory_targets={"t": target})

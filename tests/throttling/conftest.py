"""Fixtures for the throttling suite (``store`` and ``clock`` come from
``tests/conftest.py``: a fresh migrated database per test, on SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from hipq.store import Store
from hipq.testing import FakeClock
from tests.throttling._helpers import Harness


@pytest.fixture
def h(store: Store, clock: FakeClock) -> Harness:
    return Harness(store, clock)

"""Fixtures of the scale-out tests: a fresh PostgreSQL database, a cluster of real
``hipq run`` processes on it, and a downstream service in the test process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.scale.cluster import Cluster, Downstream, empty_database

LEASE_SECONDS = 2.0


@pytest.fixture
async def database(pg_url: str) -> AsyncIterator[tuple[str, str]]:
    """(asyncpg URL, SQLAlchemy URL) of a new empty database."""
    async with empty_database(pg_url) as urls:
        yield urls


@pytest.fixture
async def downstream() -> AsyncIterator[Downstream]:
    service = Downstream()
    await service.start()
    yield service
    await service.close()


@pytest.fixture
def make_cluster(database: tuple[str, str], tmp_path: Path) -> AsyncIterator[type]:
    made: list[Cluster] = []

    def make(queues: list[dict[str, object]], **reconcile: object) -> Cluster:
        pg, url = database
        settings = {"interval_seconds": 0.2, "lease_seconds": LEASE_SECONDS, **reconcile}
        database_options = {}
        if "notify" in settings:
            database_options["notify"] = settings.pop("notify")
        cluster = Cluster(url=url, pg=pg, workdir=tmp_path, queues=queues, reconcile=settings,
                          database=database_options)
        made.append(cluster)
        return cluster

    yield make  # type: ignore[misc]
    for cluster in made:
        cluster.cleanup()

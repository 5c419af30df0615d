"""Helpers for the tests of the intake's read side (docs/from-your-database.md: ``GET /v1/intake``,
``/v1/stats``, the metrics, the dashboard): an API served without a reconcile loop,
so rows put in the intake stay as the test leaves them (pending rows are not
ingested), and producers that write rows as ``hipq.sql`` does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from hipq import sql
from hipq.api import ApiDeps, ApiServer
from hipq.config import ApiConfig, TokenConfig
from hipq.responses.signing import Signer
from hipq.service import Hipq
from hipq.store import Store, open_store
from hipq.store import schema as s
from tests.api.conftest import TOKENS, Api


@dataclass
class Bare:
    api: Api
    store: Store
    db_url: str


@contextlib.asynccontextmanager
async def bare_api(db_url: str) -> AsyncIterator[Bare]:
    """The API alone on 127.0.0.1 (no daemon: nothing is ingested nor launched)."""
    store = await open_store(db_url)
    config = ApiConfig(host="127.0.0.1", port=0, stats_max_age_seconds=0,
                       tokens=[TokenConfig.model_validate(t) for t in TOKENS])
    server = ApiServer(ApiDeps(service=Hipq(store), config=config, signer=Signer("k")))
    port = await server.start()
    session = aiohttp.ClientSession()
    try:
        yield Bare(Api(f"http://127.0.0.1:{port}", session), store, db_url)
    finally:
        await session.close()
        await server.stop()
        await store.close()


def _sync_url(db_url: str) -> str:
    """The URL of a sync SQLAlchemy engine on the same database (a producer's)."""
    scheme, rest = db_url.split("://", 1)
    return ("postgresql+psycopg" if scheme.startswith("postgresql") else "sqlite") + "://" + rest


def _produce(db_url: str, queue: str, jobs: Sequence[sql.JobItem]) -> None:
    engine = sa.create_engine(_sync_url(db_url), poolclass=NullPool)
    try:
        with engine.begin() as conn:  # the producer's own transaction
            sql.enqueue_many(conn, queue, jobs)
    finally:
        engine.dispose()


async def produce(db_url: str, queue: str, jobs: Sequence[sql.JobItem]) -> None:
    """Enqueue ``jobs`` with ``hipq.sql`` in a transaction of a sync SQLAlchemy
    engine, as a producer's web app does (in a thread: the loop serves meanwhile)."""
    await asyncio.to_thread(_produce, db_url, queue, jobs)


async def insert_rejected(store: Store, rows: Sequence[dict[str, Any]]) -> None:
    """Rows straight into the intake, already rejected (``error``, ``rejected_at``
    given): the listing's fixtures, without waiting for an ingest."""
    defaults: dict[str, Any] = {"job_id": None, "data": {}, "run_after": None, "fields": {}}
    async with store.engine.begin() as conn:  # type: ignore[attr-defined]
        await conn.execute(s.job_intake.insert(), [defaults | row for row in rows])


def at(second: int) -> datetime:
    return datetime.fromisoformat(f"2030-01-01T00:00:{second:02d}+00:00")

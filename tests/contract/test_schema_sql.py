"""``schema.sql`` is the canonical PostgreSQL DDL: it must match both the code that
renders it and what ``migrate()`` builds."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa

from hipq.errors import SchemaError
from hipq.store import Store, open_store
from hipq.store.schema import SCHEMA_VERSION, render_postgres_ddl
from hipq.testing import migrate_database

SCHEMA_SQL = Path(__file__).resolve().parents[2] / "schema.sql"

_numbers = itertools.count()

COLUMNS = """
    SELECT table_name, column_name, data_type, udt_name, is_nullable, column_default
    FROM information_schema.columns WHERE table_schema = 'public'
    ORDER BY table_name, column_name
"""
INDEXES = """
    SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'
    ORDER BY tablename, indexname
"""
CONSTRAINTS = """
    SELECT conrelid::regclass::text AS table_name, conname, pg_get_constraintdef(oid) AS def
    FROM pg_constraint WHERE connamespace = 'public'::regnamespace
    ORDER BY 1, 2
"""


def test_schema_sql_is_rendered_from_the_code() -> None:
    assert SCHEMA_SQL.read_text() == render_postgres_ddl(), (
        "schema.sql is stale: run python -m hipq.store.schema > schema.sql")


async def _shape(conn: asyncpg.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {name: [tuple(r) for r in await conn.fetch(query)]
            for name, query in (("columns", COLUMNS), ("indexes", INDEXES),
                                ("constraints", CONSTRAINTS))}


@pytest.fixture
async def empty_database(pg_url: str) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    """Makes empty databases on the test server (plain ``postgresql://`` URLs);
    drops them at teardown."""
    admin = await asyncpg.connect(pg_url)
    names: list[str] = []

    async def make() -> str:
        names.append(f"schema_{os.getpid()}_{next(_numbers)}")
        await admin.execute(f"CREATE DATABASE {names[-1]}")
        return pg_url.rsplit("/", 1)[0] + "/" + names[-1]

    try:
        yield make
        for name in names:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await admin.close()


async def _shape_after_file(url: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(SCHEMA_SQL.read_text())
        return await _shape(conn)
    finally:
        await conn.close()


async def _shape_after_migrate(url: str) -> dict[str, list[tuple[Any, ...]]]:
    await migrate_database(url)
    conn = await asyncpg.connect(url)
    try:
        return await _shape(conn)
    finally:
        await conn.close()


async def test_schema_sql_matches_migrate(
        empty_database: Callable[[], Awaitable[str]]) -> None:
    expected = await _shape_after_file(await empty_database())
    actual = await _shape_after_migrate(await empty_database())

    assert {t for t, *_ in expected["columns"]} >= {"jobs", "archived_jobs", "hipq_meta"}
    assert len(expected["indexes"]) > 10
    assert actual == expected


async def test_check_schema_refuses_an_unmigrated_database(
        empty_database: Callable[[], Awaitable[str]], tmp_path: Path) -> None:
    for url in (f"sqlite:///{tmp_path}/empty.db", await empty_database()):
        store = await open_store(url)
        try:
            with pytest.raises(SchemaError, match="hipq migrate"):
                await store.check_schema()
        finally:
            await store.close()


async def test_migrate_is_idempotent(store: Store) -> None:
    assert await store.migrate() == SCHEMA_VERSION
    assert await store.migrate() == SCHEMA_VERSION
    await store.check_schema()
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.text("SELECT key, value FROM hipq_meta"))).all()
    assert [tuple(r) for r in rows] == [("schema_version", str(SCHEMA_VERSION))]


VERSION_1 = [  # what version 1 had where later versions differ
    "DROP INDEX ux_jobs_correlation_key",
    "CREATE UNIQUE INDEX ux_jobs_correlation_key ON jobs (correlation_key)",
    "CREATE INDEX ix_job_attempts_finished ON job_attempts (finished_at)",
    "ALTER TABLE response_inbox DROP COLUMN token",  # version 3
    "DROP TABLE daemons",  # version 4
    "DROP INDEX ix_response_inbox_unmatched",  # version 5
    "UPDATE hipq_meta SET value = '1' WHERE key = 'schema_version'",
]


async def test_migrate_upgrades_a_version_1_database(
        empty_database: Callable[[], Awaitable[str]]) -> None:
    expected = await _shape_after_migrate(await empty_database())
    url = await empty_database()
    await migrate_database(url)
    conn = await asyncpg.connect(url)
    try:
        for statement in VERSION_1:
            await conn.execute(statement)
        await conn.execute("INSERT INTO jobs (queue, id, token, status, data, run_at, priority, "
                           "weight, critical, timeout_seconds, correlation_fixed, attempt, "
                           "max_attempts, created_at, updated_at, launch_confirmed, body_hash) "
                           "VALUES ('q', 'kept', 't', 'queued', '{}', now(), 1, 1, false, 1, "
                           "false, 0, 1, now(), now(), false, 'h')")
    finally:
        await conn.close()
    store = await open_store(url)
    try:
        with pytest.raises(SchemaError, match="version 1"):
            await store.check_schema()
        assert await store.migrate() == SCHEMA_VERSION
        await store.check_schema()
        assert await store.job_get("q", "kept") is not None
    finally:
        await store.close()
    conn = await asyncpg.connect(url)
    try:
        assert await _shape(conn) == expected
    finally:
        await conn.close()


async def test_migrate_upgrades_a_version_1_sqlite_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/v1.db"
    store = await open_store(url)
    try:
        await store.migrate()
        async with store.engine.begin() as conn:
            for statement in VERSION_1:
                await conn.exec_driver_sql(statement)
        assert await store.migrate() == SCHEMA_VERSION
        async with store.engine.connect() as conn:
            indexes = dict((await conn.exec_driver_sql(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index'")).all())
    finally:
        await store.close()
    assert "ix_job_attempts_finished" not in indexes
    assert "WHERE outcome = 'unmatched'" in indexes["ix_response_inbox_unmatched"]
    assert "WHERE correlation_key IS NOT NULL" in indexes["ux_jobs_correlation_key"]

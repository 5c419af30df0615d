"""The schema and its migrations.

``schema.sql`` (the canonical PostgreSQL DDL, rendered from the metadata of
``hipq/store/schema.py``) equals what the numbered files of
``hipq/store/migrations/postgresql/`` make of an empty database, compared through
the catalog (columns in order, types, defaults, indexes, constraints, sequences);
SQLite's files make what the metadata describes (its ``create_all``), compared
through SQLite's catalog. A database at any earlier version, on either database,
upgrades in place to exactly what a fresh one gets."""

from __future__ import annotations

import itertools
import os
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa

from hipq.errors import SchemaError
from hipq.store import Store, open_store
from hipq.store import schema as s
from hipq.store.schema import SCHEMA_VERSION, migrations, render_postgres_ddl
from hipq.store.sqlite import statements
from hipq.testing import migrate_database

pytestmark = pytest.mark.sql_only  # the schema and its migrations

SCHEMA_SQL = Path(__file__).resolve().parents[2] / "schema.sql"
DIALECTS = ("postgresql", "sqlite")
OLDER = list(range(1, SCHEMA_VERSION))

_numbers = itertools.count()

COLUMNS = """
    SELECT table_name, column_name,
           row_number() OVER (PARTITION BY table_name ORDER BY ordinal_position) AS position,
           data_type, udt_name, is_nullable, column_default
    FROM information_schema.columns WHERE table_schema = 'public'
    ORDER BY table_name, position
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
SEQUENCES = """
    SELECT sequencename, data_type, start_value, increment_by, max_value
    FROM pg_sequences WHERE schemaname = 'public' ORDER BY sequencename
"""
STORAGE = """
    SELECT relname, reloptions FROM pg_class
    WHERE relnamespace = 'public'::regnamespace AND reloptions IS NOT NULL
    ORDER BY relname
"""
A_JOB = ("INSERT INTO jobs (queue, id, token, status, data, run_at, priority, weight, critical, "
         "timeout_seconds, correlation_fixed, attempt, max_attempts, created_at, updated_at, "
         "launch_confirmed, body_hash) VALUES ('q', 'kept', 't', 'queued', '{}', NOW, 1, 1, "
         "false, 1, false, 0, 1, NOW, NOW, false, 'h')")


def test_schema_sql_is_rendered_from_the_code() -> None:
    assert SCHEMA_SQL.read_text() == render_postgres_ddl(), (
        "schema.sql is stale: run python -m hipq.store.schema > schema.sql")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_one_migration_file_per_version(dialect: str) -> None:
    found = migrations(dialect)
    assert [m.version for m in found] == list(range(1, SCHEMA_VERSION + 1))
    assert all(m.name.startswith(f"{m.version:04d}_") for m in found)
    assert [m.name for m in found] == [m.name for m in migrations("postgresql")]


def test_migrations_are_packaged() -> None:
    pyproject = (SCHEMA_SQL.parent / "pyproject.toml").read_text()
    assert '"hipq.store" = ["*.sql", "migrations/*/*.sql"]' in pyproject


# -- PostgreSQL ------------------------------------------------------------------------


async def _shape(conn: asyncpg.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {name: [tuple(r) for r in await conn.fetch(query)]
            for name, query in (("columns", COLUMNS), ("indexes", INDEXES),
                                ("constraints", CONSTRAINTS), ("sequences", SEQUENCES),
                                ("storage", STORAGE))}


async def _run(url: str, *scripts: str) -> dict[str, list[tuple[Any, ...]]]:
    """Run these SQL scripts on ``url``; the catalog's shape afterwards."""
    conn = await asyncpg.connect(url)
    try:
        for script in scripts:
            await conn.execute(script)
        return await _shape(conn)
    finally:
        await conn.close()


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


async def _migrated(url: str) -> dict[str, list[tuple[Any, ...]]]:
    assert await migrate_database(url) == SCHEMA_VERSION
    return await _run(url)


async def test_schema_sql_equals_the_migrations(
        empty_database: Callable[[], Awaitable[str]]) -> None:
    expected = await _run(await empty_database(), SCHEMA_SQL.read_text())
    actual = await _migrated(await empty_database())

    assert {t for t, *_ in expected["columns"]} >= {"jobs", "archived_jobs", "hipq_meta"}
    assert len(expected["indexes"]) > 10
    assert expected["sequences"]
    assert actual == expected


async def _upgrade(url: str, version: int) -> None:
    """Migrate a database that is at ``version``, with a job in it."""
    store = await open_store(url)
    try:
        with pytest.raises(SchemaError, match=f"version {version}"):
            await store.check_schema()
        assert await store.migrate() == SCHEMA_VERSION
        await store.check_schema()
        assert await store.job_get("q", "kept") is not None
    finally:
        await store.close()


@pytest.mark.parametrize("version", OLDER)
async def test_a_postgresql_database_at_an_older_version_upgrades_in_place(
        empty_database: Callable[[], Awaitable[str]], version: int) -> None:
    """A database as that version left it (its files, run as hipq ran them then)."""
    expected = await _migrated(await empty_database())
    url = await empty_database()
    await _run(url, *(m.sql for m in migrations("postgresql")[:version]),
               f"INSERT INTO hipq_meta VALUES ('schema_version', '{version}')",
               A_JOB.replace("NOW", "now()"))
    await _upgrade(url, version)
    assert await _run(url) == expected


VERSION_1 = [  # what version 1 had where later versions differ
    "DROP INDEX ux_jobs_correlation_key",
    "CREATE UNIQUE INDEX ux_jobs_correlation_key ON jobs (correlation_key)",
    "CREATE INDEX ix_job_attempts_finished ON job_attempts (finished_at)",
    "ALTER TABLE response_inbox DROP COLUMN token",  # version 3
    "DROP TABLE daemons",  # version 4
    "DROP INDEX ix_response_inbox_unmatched",  # version 5
    "ALTER TABLE jobs DROP COLUMN trace",  # version 8
    "ALTER TABLE archived_jobs DROP COLUMN trace",
    "ALTER TABLE archived_jobs DROP COLUMN history_folded",  # version 11
    "DROP INDEX ix_response_inbox_applied",  # version 12
    "CREATE INDEX ix_response_inbox_applied ON response_inbox (applied_at)",
    "DROP INDEX ix_archived_jobs_folded_key",  # version 13
    "ALTER TABLE archived_jobs DROP COLUMN history_source",
    "ALTER TABLE queue_state DROP COLUMN learned_rate",  # version 16
    "ALTER TABLE queue_state DROP COLUMN learned_since",
    "ALTER TABLE queue_state DROP COLUMN budget",
    "DROP TABLE partner_state",  # version 17
    "DROP TABLE partner_minutes",
    "UPDATE hipq_meta SET value = '1' WHERE key = 'schema_version'",
]


async def test_migrate_upgrades_a_version_1_database(
        empty_database: Callable[[], Awaitable[str]]) -> None:
    """Version 1 made by taking a current database back (the column dropped and
    added again moves to the end of its table, as in a real upgrade)."""
    expected = await _migrated(await empty_database())
    url = await empty_database()
    await migrate_database(url)
    await _run(url, *VERSION_1, "ALTER TABLE jobs RESET (fillfactor)",  # version 12
               A_JOB.replace("NOW", "now()"))
    await _upgrade(url, 1)
    assert await _run(url) == expected


async def test_a_database_made_from_schema_sql_is_adopted(
        empty_database: Callable[[], Awaitable[str]]) -> None:
    """Tables made by hand from schema.sql, no version recorded: migrate runs every
    file (each one IF NOT EXISTS) and records the version; nothing changes shape."""
    expected = await _migrated(await empty_database())
    url = await empty_database()
    await _run(url, SCHEMA_SQL.read_text(), A_JOB.replace("NOW", "now()"))
    store = await open_store(url)
    try:
        assert await store.migrate() == SCHEMA_VERSION
        await store.check_schema()
        assert await store.job_get("q", "kept") is not None
    finally:
        await store.close()
    assert await _run(url) == expected


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
    async with store.engine.connect() as conn:  # type: ignore[attr-defined]
        rows = (await conn.execute(sa.text("SELECT key, value FROM hipq_meta"))).all()
    assert [tuple(r) for r in rows] == [("schema_version", str(SCHEMA_VERSION))]


async def test_migrate_refuses_a_newer_database(store: Store) -> None:
    async with store.engine.begin() as conn:  # type: ignore[attr-defined]
        await conn.execute(sa.text("UPDATE hipq_meta SET value = :v WHERE key = 'schema_version'"),
                           {"v": str(SCHEMA_VERSION + 1)})
    with pytest.raises(SchemaError, match="newer than this hipq"):
        await store.migrate()
    with pytest.raises(SchemaError, match=f"version {SCHEMA_VERSION + 1}"):
        await store.check_schema()


# -- SQLite ------------------------------------------------------------------------------


def _sqlite_shape(path: Path) -> dict[str, Any]:
    """Each table's columns (name, declared type, NOT NULL, default, primary key
    position, in order) and indexes (unique, origin, partial, columns, predicate)."""
    con = sqlite3.connect(path)
    try:
        shape: dict[str, Any] = {}
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                    "AND name NOT LIKE 'sqlite_%' ORDER BY name"):
            columns = [tuple(r[1:]) for r in con.execute(f"PRAGMA table_xinfo({table})")]
            indexes = []
            for _, name, unique, origin, partial in con.execute(f"PRAGMA index_list({table})"):
                indexed = [r[2] for r in con.execute(f"PRAGMA index_info('{name}')")]
                sql = con.execute("SELECT sql FROM sqlite_master WHERE name = ?",
                                  (name,)).fetchone()[0]
                where = " ".join(sql.split(" WHERE ", 1)[1].split()) if partial else None
                indexes.append((name if origin == "c" else origin, unique, origin, partial,
                                indexed, where))
            shape[table] = (columns, sorted(indexes))
        return shape
    finally:
        con.close()


def _sqlite_files(path: Path, version: int) -> None:
    """Run the SQLite files up to ``version`` on ``path`` and record the version."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for migration in migrations("sqlite")[:version]:
            for statement in statements(migration.sql):
                con.execute(statement)
        con.execute("INSERT INTO hipq_meta VALUES ('schema_version', ?)", (str(version),))
        con.execute(A_JOB.replace("NOW", "1.0").replace("false", "0"))
    finally:
        con.close()


async def test_sqlite_migrations_make_what_the_metadata_describes(tmp_path: Path) -> None:
    described = tmp_path / "metadata.db"
    engine = sa.create_engine(f"sqlite:///{described}")
    s.metadata.create_all(engine)
    engine.dispose()
    migrated = tmp_path / "migrated.db"
    assert await migrate_database(f"sqlite:///{migrated}") == SCHEMA_VERSION

    expected = _sqlite_shape(described)
    assert set(expected) == {t.name for t in s.metadata.sorted_tables}
    assert _sqlite_shape(migrated) == expected


@pytest.mark.parametrize("version", OLDER)
async def test_a_sqlite_database_at_an_older_version_upgrades_in_place(
        tmp_path: Path, version: int) -> None:
    fresh = tmp_path / "fresh.db"
    await migrate_database(f"sqlite:///{fresh}")
    old = tmp_path / "old.db"
    _sqlite_files(old, version)
    await _upgrade(f"sqlite:///{old}", version)
    assert _sqlite_shape(old) == _sqlite_shape(fresh)


async def test_migrate_upgrades_a_version_1_sqlite_database(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    await migrate_database(f"sqlite:///{fresh}")
    url = f"sqlite:///{tmp_path}/v1.db"
    store = await open_store(url)
    try:
        await store.migrate()
        async with store.engine.begin() as conn:  # type: ignore[attr-defined]
            for statement in VERSION_1:
                await conn.exec_driver_sql(statement)
        assert await store.migrate() == SCHEMA_VERSION
        async with store.engine.connect() as conn:  # type: ignore[attr-defined]
            indexes = dict((await conn.exec_driver_sql(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index'")).all())
    finally:
        await store.close()
    assert "ix_job_attempts_finished" not in indexes
    assert "WHERE outcome = 'unmatched'" in indexes["ix_response_inbox_unmatched"]
    assert "WHERE correlation_key IS NOT NULL" in indexes["ux_jobs_correlation_key"]
    assert _sqlite_shape(tmp_path / "v1.db") == _sqlite_shape(fresh)


def test_a_migration_script_splits_into_its_statements() -> None:
    script = ("-- a comment; with a semicolon and an apostrophe's\n"
              "CREATE TABLE t (a TEXT DEFAULT 'x;y');\n\n"
              "CREATE INDEX i ON t (a)\n    WHERE a <> ';';\n-- the end\n")
    assert list(statements(script)) == [
        "-- a comment; with a semicolon and an apostrophe's\n"
        "CREATE TABLE t (a TEXT DEFAULT 'x;y');",
        "CREATE INDEX i ON t (a)\n    WHERE a <> ';';"]
    with pytest.raises(ValueError, match="unterminated"):
        list(statements("CREATE TABLE t (a TEXT)\n"))

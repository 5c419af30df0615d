"""History rows (``job_attempts``) written and read past the store, straight in its
database, on SQLite and PostgreSQL: what an older daemon, a hand edit or a writer
gone wrong may have left there, and what a writer really stored."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing
from datetime import datetime
from typing import Any

import asyncpg  # type: ignore[import-untyped]

_INSERT = ("INSERT INTO job_attempts (queue, job_id, attempt, correlation_key, launched_at, "
           "finished_at, outcome, error) VALUES ({})")
_SELECT = ("SELECT CAST(error AS TEXT) FROM job_attempts WHERE queue = {} AND job_id = {} "
           "ORDER BY attempt, id")


def _sqlite_path(db_url: str) -> str:
    return db_url.split(":///", 1)[1]


def _sqlite(db_url: str, sql: str, values: tuple[Any, ...]) -> list[Any]:
    """``sql`` run and committed on a connection of its own, in a thread: a daemon of
    this event loop may hold the database meanwhile, and must go on to let it go."""
    with closing(sqlite3.connect(_sqlite_path(db_url), timeout=30)) as conn, conn:
        return conn.execute(sql, values).fetchall()


def _pg_dsn(db_url: str) -> str:
    return db_url.replace("postgresql+asyncpg://", "postgresql://")


async def write_history_row(db_url: str, queue: str, job_id: str, *, attempt: int,
                            outcome: str, error_json: str | None, at: datetime) -> None:
    """One row of ``job_attempts`` whose ``error`` holds the JSON text ``error_json``
    as it is (None: SQL NULL)."""
    if db_url.startswith("sqlite"):
        await asyncio.to_thread(_sqlite, db_url, _INSERT.format(", ".join("?" * 8)),
                                (queue, job_id, attempt, None, at.timestamp(),
                                 at.timestamp(), outcome, error_json))
        return
    conn = await asyncpg.connect(_pg_dsn(db_url))
    try:
        await conn.execute(_INSERT.format("$1, $2, $3, $4, $5, $6, $7, $8::jsonb"),
                           queue, job_id, attempt, None, at, at, outcome, error_json)
    finally:
        await conn.close()


async def stored_errors(db_url: str, queue: str, job_id: str) -> list[Any]:
    """The ``error`` values of a job's rows of ``job_attempts`` as stored (JSON
    decoded, nothing normalized), in history order."""
    if db_url.startswith("sqlite"):
        texts = [r[0] for r in await asyncio.to_thread(
            _sqlite, db_url, _SELECT.format("?", "?"), (queue, job_id))]
    else:
        conn = await asyncpg.connect(_pg_dsn(db_url))
        try:
            texts = [r[0] for r in await conn.fetch(_SELECT.format("$1", "$2"), queue, job_id)]
        finally:
            await conn.close()
    return [None if t is None else json.loads(t) for t in texts]

"""What one benchmark window cost PostgreSQL, per job: the statements run in the
benchmark's database (``pg_stat_statements``, when the server preloads it, as the
throwaway servers of bench/run do), their execution time, and the WAL written
(cluster-wide: one workload runs at a time).

    costs = PgCosts(server, database)
    await costs.start()
    ...                                   # the timed work
    out = await costs.stop(jobs)          # {"statements_per_job": ..., ...}
"""

from __future__ import annotations

import os
from typing import Any

import asyncpg

# the throwaway servers of bench/run preload it (scripts/pg-ephemeral's PG_EPHEMERAL_SETTINGS)
PRELOAD = "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.max = 10000"

_SNAPSHOT = """
SELECT coalesce(sum(s.calls), 0)::int8 AS calls,
       coalesce(sum(s.total_exec_time), 0)::float8 AS exec_ms
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = $1"""

# per statement (PostgreSQL 13+: wal_bytes); the text is shortened for a line
_BY_STATEMENT = """
SELECT s.queryid, left(regexp_replace(s.query, '\\s+', ' ', 'g'), 90) AS query,
       s.calls::int8 AS calls, s.total_exec_time::float8 AS exec_ms,
       s.wal_bytes::int8 AS wal
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = $1"""
TOP_STATEMENTS = 8

# HIPQ_BENCH_WAL_BY_RELATION=1: the window's WAL by the relation of each record's first
# block (pg_walinspect, PostgreSQL 15+; a superuser's server, as bench/run's throwaway
# ones), for the where-does-it-go question; off by default (it reads the whole window)
WAL_BY_RELATION = bool(os.environ.get("HIPQ_BENCH_WAL_BY_RELATION"))
_WAL_BY_RELATION = """
WITH r AS (
    SELECT record_length, fpi_length, resource_manager,
           substring(block_ref from 'rel \\d+/\\d+/(\\d+)')::oid AS node
    FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn))
SELECT coalesce(c.relname, r.resource_manager) AS relation,
       sum(r.record_length)::int8 AS bytes, sum(r.fpi_length)::int8 AS fpi,
       count(*)::int8 AS records
FROM r LEFT JOIN pg_class c ON c.relfilenode = r.node
GROUP BY 1 ORDER BY 2 DESC LIMIT 12"""


# the database's server processes (hipq's pool opens connections on demand: those
# opened within the window cost PostgreSQL a process start and cold caches there)
_BACKENDS = "SELECT count(*)::int FROM pg_stat_activity WHERE datname = $1"


class PgCosts:
    """Snapshots before and after; ``stop`` gives the differences per job (None where
    ``pg_stat_statements`` is not loaded)."""

    def __init__(self, server: str, database: str) -> None:
        self.server, self.database = server, database
        self._conn: Any = None
        self._before: dict[str, float] | None = None
        self._by_statement: dict[int, Any] = {}
        self._wal: int | None = None
        self._lsn: str | None = None
        self.available = False
        self._backends = 0

    async def start(self) -> None:
        self._conn = await asyncpg.connect(self.server)
        try:
            await self._conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await self._conn.fetchval("SELECT count(*) FROM pg_stat_statements")
            self.available = True
        except asyncpg.PostgresError:
            self.available = False
        self._before = await self._snapshot() if self.available else None
        self._by_statement = await self._statements() if self.available else {}
        self._lsn = str(await self._conn.fetchval("SELECT pg_current_wal_lsn()::text"))
        self._backends = int(await self._conn.fetchval(_BACKENDS, self.database))
        self._wal = int(await self._conn.fetchval(
            "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))

    async def _snapshot(self) -> dict[str, float]:
        row = await self._conn.fetchrow(_SNAPSHOT, self.database)
        return {"calls": float(row["calls"]), "exec_ms": float(row["exec_ms"])}

    async def _statements(self) -> dict[int, Any]:
        rows = await self._conn.fetch(_BY_STATEMENT, self.database)
        return {row["queryid"]: row for row in rows}

    async def _top(self, jobs: int) -> list[dict[str, Any]]:
        """The statements that took the most time in the window, per job."""
        out = []
        for queryid, row in (await self._statements()).items():
            before = self._by_statement.get(queryid)
            calls = row["calls"] - (before["calls"] if before else 0)
            if calls <= 0:
                continue
            out.append({
                "query": row["query"], "calls_per_job": round(calls / jobs, 4),
                "ms_per_job": round((row["exec_ms"] - (before["exec_ms"] if before else 0))
                                    / jobs, 4),
                "wal_bytes_per_job": round((row["wal"] - (before["wal"] if before else 0))
                                           / jobs, 1)})
        out.sort(key=lambda s: -s["ms_per_job"])
        return out[:TOP_STATEMENTS]

    async def _wal_by_relation(self, jobs: int) -> list[dict[str, Any]]:
        end = str(await self._conn.fetchval("SELECT pg_current_wal_lsn()::text"))
        conn = await asyncpg.connect(self.server, database=self.database)
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
            rows = await conn.fetch(_WAL_BY_RELATION, self._lsn, end)
        finally:
            await conn.close()
        return [{"relation": r["relation"], "bytes_per_job": round(r["bytes"] / jobs, 1),
                 "fpi_bytes_per_job": round(r["fpi"] / jobs, 1),
                 "records_per_job": round(r["records"] / jobs, 3)} for r in rows]

    async def stop(self, jobs: int) -> dict[str, Any]:
        try:
            wal = int(await self._conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))
            out: dict[str, Any] = {
                "wal_bytes_per_job": round((wal - (self._wal or wal)) / max(jobs, 1), 1)}
            out["backends"] = [self._backends,
                               int(await self._conn.fetchval(_BACKENDS, self.database))]
            if WAL_BY_RELATION:
                out["wal_by_relation"] = await self._wal_by_relation(max(jobs, 1))
            if self._before is not None:
                after = await self._snapshot()
                out["statements_per_job"] = round(
                    (after["calls"] - self._before["calls"]) / max(jobs, 1), 4)
                out["statement_ms_per_job"] = round(
                    (after["exec_ms"] - self._before["exec_ms"]) / max(jobs, 1), 4)
                out["top_statements"] = await self._top(max(jobs, 1))
            else:
                out["statements_per_job"] = out["statement_ms_per_job"] = None
            return out
        finally:
            await self._conn.close()


def pg_per_job(costs: dict[str, Any]) -> str:
    """What ``PgCosts.stop`` measured (a run's ``postgres_per_job``), for a line."""
    return (f"PostgreSQL statements {costs.get('statements_per_job')}, statement time "
            f"{costs.get('statement_ms_per_job')} ms, WAL {costs.get('wal_bytes_per_job')} bytes"
            + (f", backends {'->'.join(map(str, costs['backends']))}"
               if costs.get("backends") else ""))


def top_statements(costs: dict[str, Any]) -> str:
    """The statements that took the most of PostgreSQL's time, then the WAL by
    relation (when measured), one line each."""
    statements = "".join(
        f"\n      {s['ms_per_job']:.4f} ms {s['wal_bytes_per_job']:>7.1f} B "
        f"x{s['calls_per_job']:<7} {s['query']}" for s in costs.get("top_statements") or ())
    relations = "".join(
        f"\n      WAL {w['bytes_per_job']:>7.1f} B (FPI {w['fpi_bytes_per_job']:.1f}) "
        f"x{w['records_per_job']:<6} {w['relation']}" for w in costs.get("wal_by_relation") or ())
    return statements + relations

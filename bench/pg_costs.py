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

from typing import Any

import asyncpg

# the throwaway servers of bench/run preload it (scripts/pg-ephemeral's PG_EPHEMERAL_SETTINGS)
PRELOAD = "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.max = 10000"

_SNAPSHOT = """
SELECT coalesce(sum(s.calls), 0)::int8 AS calls,
       coalesce(sum(s.total_exec_time), 0)::float8 AS exec_ms
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = $1"""


class PgCosts:
    """Snapshots before and after; ``stop`` gives the differences per job (None where
    ``pg_stat_statements`` is not loaded)."""

    def __init__(self, server: str, database: str) -> None:
        self.server, self.database = server, database
        self._conn: Any = None
        self._before: dict[str, float] | None = None
        self._wal: int | None = None
        self.available = False

    async def start(self) -> None:
        self._conn = await asyncpg.connect(self.server)
        try:
            await self._conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await self._conn.fetchval("SELECT count(*) FROM pg_stat_statements")
            self.available = True
        except asyncpg.PostgresError:
            self.available = False
        self._before = await self._snapshot() if self.available else None
        self._wal = int(await self._conn.fetchval(
            "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))

    async def _snapshot(self) -> dict[str, float]:
        row = await self._conn.fetchrow(_SNAPSHOT, self.database)
        return {"calls": float(row["calls"]), "exec_ms": float(row["exec_ms"])}

    async def stop(self, jobs: int) -> dict[str, Any]:
        try:
            wal = int(await self._conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))
            out: dict[str, Any] = {
                "wal_bytes_per_job": round((wal - (self._wal or wal)) / max(jobs, 1), 1)}
            if self._before is not None:
                after = await self._snapshot()
                out["statements_per_job"] = round(
                    (after["calls"] - self._before["calls"]) / max(jobs, 1), 4)
                out["statement_ms_per_job"] = round(
                    (after["exec_ms"] - self._before["exec_ms"]) / max(jobs, 1), 4)
            else:
                out["statements_per_job"] = out["statement_ms_per_job"] = None
            return out
        finally:
            await self._conn.close()


def pg_per_job(costs: dict[str, Any]) -> str:
    """What ``PgCosts.stop`` measured (a run's ``postgres_per_job``), for a line."""
    return (f"PostgreSQL statements {costs.get('statements_per_job')}, statement time "
            f"{costs.get('statement_ms_per_job')} ms, WAL {costs.get('wal_bytes_per_job')} bytes")

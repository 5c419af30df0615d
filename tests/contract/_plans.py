"""PostgreSQL plans of the driver's named statements, as a prepared statement settles
on them: ``PREPARE`` the block, then ``EXPLAIN EXECUTE`` it under
``plan_cache_mode = force_generic_plan`` (a plan made without seeing the values,
what asyncpg's prepared statements get after five runs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from hipq.store import Store
from hipq.store.pgsql import SQL


def literal(value: Any) -> str:
    """A SQL literal for EXECUTE's arguments (which cannot be bind parameters)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, datetime):
        return f"'{value.isoformat()}'::timestamptz"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, list):  # an empty one as an untyped literal: the parameter's type
        return "ARRAY[" + ", ".join(literal(v) for v in value) + "]" if value else "'{}'"
    raise TypeError(f"no literal for {value!r}")


async def generic_plan(store: Store, name: str, *, seqscan: bool = True,
                       **values: Any) -> dict[str, Any]:
    """The generic plan of the named statement with these values (``seqscan=False``:
    judge the index choice on a small table)."""
    statement = SQL[name]
    args = ", ".join(literal(v) for v in statement.args(**values))
    engine = store.engine  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        transaction = raw.transaction()
        await transaction.start()
        try:
            await raw.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            if not seqscan:
                await raw.execute("SET LOCAL enable_seqscan = off")
            await raw.execute(f"PREPARE hipq_generic AS {statement.sql}")
            text = await raw.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE hipq_generic({args})")
            await raw.execute("DEALLOCATE hipq_generic")
        finally:
            await transaction.rollback()
    document = json.loads(text) if isinstance(text, str | bytes) else text
    plan: dict[str, Any] = document[0]["Plan"]
    return plan


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def main_scans(plan: dict[str, Any], relation: str) -> list[dict[str, Any]]:
    """The reads of ``relation`` that produce the rows (not those of a SubPlan or
    InitPlan, such as an ordering key's check)."""
    found = []
    if plan.get("Relation Name") == relation and "Scan" in plan["Node Type"]:
        found.append(plan)
    for child in plan.get("Plans", []):
        if child.get("Parent Relationship") not in ("SubPlan", "InitPlan"):
            found.extend(main_scans(child, relation))
    return found

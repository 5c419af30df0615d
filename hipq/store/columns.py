"""The columns of a job row (``jobs``, ``archived_jobs``) as plain data: their names,
kinds and nullability, with no SQLAlchemy. :mod:`hipq.store.tables` builds the
SQLAlchemy tables from them; the PostgreSQL driver and the row readers need only the
names and which of them hold JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["text", "json", "time", "int", "bool", "float"]


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    name: str
    kind: Kind
    nullable: bool = True


def _c(name: str, kind: Kind, *, null: bool = False) -> ColumnSpec:
    return ColumnSpec(name=name, kind=kind, nullable=null)


# the columns ``jobs`` and ``archived_jobs`` share, in table order
JOB_COLUMN_SPECS: tuple[ColumnSpec, ...] = (
    _c("queue", "text"),
    _c("id", "text"),
    _c("token", "text"),
    _c("status", "text"),
    _c("data", "json"),
    _c("run_at", "time"),
    _c("expires_at", "time", null=True),
    _c("priority", "int"),
    _c("weight", "int"),
    _c("critical", "bool"),
    _c("time_windows", "json", null=True),
    _c("timezone", "text", null=True),
    _c("timeout_seconds", "float"),
    _c("correlation_key", "text", null=True),
    _c("correlation_fixed", "bool"),
    _c("ordering_key", "text", null=True),
    _c("key_order_at", "time", null=True),
    _c("group_key", "text", null=True),
    _c("attempt", "int"),
    _c("max_attempts", "int"),
    _c("created_at", "time"),
    _c("updated_at", "time"),
    _c("launched_at", "time", null=True),
    _c("deadline", "time", null=True),
    _c("owner", "text", null=True),
    _c("launch_confirmed", "bool"),
    _c("result", "json", null=True),
    _c("error", "json", null=True),
    _c("replay_of", "text", null=True),
    _c("body_hash", "text"),
)
# trace: the job's W3C trace context (hipq.tracing), added by version 8, hence last
TRACE = _c("trace", "text", null=True)

# the names of the columns of ``jobs``, in table order
JOBS_COLUMN_NAMES: tuple[str, ...] = (*(c.name for c in JOB_COLUMN_SPECS), TRACE.name)
# those that hold JSON
JSON_JOB_COLUMNS: frozenset[str] = frozenset(c.name for c in JOB_COLUMN_SPECS if c.kind == "json")

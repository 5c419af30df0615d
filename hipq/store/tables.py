"""hipq's tables as SQLAlchemy metadata: what the SQLite driver's statements are built
on, and what renders ``schema.sql``. Reached through :mod:`hipq.store.schema` (whose
names load this module, and SQLAlchemy with it, on first use); the PostgreSQL driver
never imports it.

The numbered migration files (:mod:`hipq.store.versions`) make the same tables; tests
check that both dialects' migrations make what this describes
(``tests/contract/test_schema_sql.py``).

Timestamps are aware UTC datetimes in Python. PostgreSQL stores them as
``timestamptz``; SQLite stores them as REAL seconds since the epoch, so that
comparisons and adding seconds are plain arithmetic there. Status predicates that
partial indexes depend on are rendered as SQL literals (``QUEUED``, ``RUNNING``),
never as bind parameters, so PostgreSQL's generic plans can still use the indexes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles

from hipq.clock import utc
from hipq.store.columns import JOB_COLUMN_SPECS, TRACE, ColumnSpec
from hipq.store.versions import SCHEMA_VERSION, enqueue_function


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(sa.Float())
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        value = utc(value)
        return value.timestamp() if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return datetime.fromtimestamp(float(value), UTC)
        return utc(value)


JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

QUEUED: sa.ColumnElement[str] = sa.literal_column("'queued'")
RUNNING: sa.ColumnElement[str] = sa.literal_column("'running'")
UNMATCHED: sa.ColumnElement[str] = sa.literal_column("'unmatched'")  # an inbox outcome

metadata = sa.MetaData()

_TYPES: dict[str, Any] = {"text": sa.Text, "json": JSON, "time": UTCDateTime,
                          "int": sa.Integer, "bool": sa.Boolean, "float": sa.Float}


def _column(spec: ColumnSpec) -> sa.Column[Any]:
    return sa.Column(spec.name, _TYPES[spec.kind], nullable=spec.nullable)


def _job_columns() -> list[sa.Column[Any]]:
    return [_column(spec) for spec in JOB_COLUMN_SPECS]


queues = sa.Table(
    "queues", metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("config", JSON, nullable=False),
    sa.Column("paused", sa.Boolean, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

jobs = sa.Table(
    "jobs", metadata, *_job_columns(), _column(TRACE),
    sa.PrimaryKeyConstraint("queue", "id", name="jobs_pkey"),
    # version 12: room on each page for a running job's updates in place (HOT)
    postgresql_with={"fillfactor": 70},
)
sa.Index("ix_jobs_due_time", jobs.c.queue, jobs.c.run_at, jobs.c.priority, jobs.c.id,
         postgresql_where=jobs.c.status == QUEUED, sqlite_where=jobs.c.status == QUEUED)
sa.Index("ix_jobs_due_priority", jobs.c.queue, jobs.c.priority, jobs.c.run_at, jobs.c.id,
         postgresql_where=jobs.c.status == QUEUED, sqlite_where=jobs.c.status == QUEUED)
_critical = sa.and_(jobs.c.status == QUEUED, jobs.c.critical == sa.true())
sa.Index("ix_jobs_due_critical", jobs.c.queue, jobs.c.run_at, jobs.c.priority, jobs.c.id,
         postgresql_where=_critical, sqlite_where=_critical)
_grouped = sa.and_(jobs.c.status == QUEUED, jobs.c.group_key.is_not(None))
sa.Index("ix_jobs_due_group_time", jobs.c.queue, jobs.c.group_key, jobs.c.run_at, jobs.c.priority,
         jobs.c.id, postgresql_where=_grouped, sqlite_where=_grouped)
sa.Index("ix_jobs_due_group_priority", jobs.c.queue, jobs.c.group_key, jobs.c.priority,
         jobs.c.run_at, jobs.c.id, postgresql_where=_grouped, sqlite_where=_grouped)
_keyed = jobs.c.ordering_key.is_not(None)
sa.Index("ix_jobs_ordering_key", jobs.c.queue, jobs.c.ordering_key, jobs.c.key_order_at,
         jobs.c.id, postgresql_where=_keyed, sqlite_where=_keyed)
sa.Index("ix_jobs_running", jobs.c.queue, jobs.c.deadline,
         postgresql_where=jobs.c.status == RUNNING, sqlite_where=jobs.c.status == RUNNING)
_expiring = sa.and_(jobs.c.status == QUEUED, jobs.c.expires_at.is_not(None))
sa.Index("ix_jobs_expires", jobs.c.expires_at,
         postgresql_where=_expiring, sqlite_where=_expiring)
# Only jobs with a key (running ones, and queued ones with a fixed key) are in it:
# a plain enqueue adds no entry. ``correlation_key = ...`` lookups imply NOT NULL.
_has_key = jobs.c.correlation_key.is_not(None)
sa.Index("ux_jobs_correlation_key", jobs.c.correlation_key, unique=True,
         postgresql_where=_has_key, sqlite_where=_has_key)

archived_jobs = sa.Table(
    "archived_jobs", metadata, *_job_columns(),
    sa.Column("finished_at", UTCDateTime, nullable=False),
    _column(TRACE),
    # version 11: the last try's history entry is this row (hipq.store.history)
    sa.Column("history_folded", sa.Boolean, nullable=False, server_default=sa.false()),
    # version 13: set with history_folded for a success by the target's own answer
    # (PostgreSQL; the history entry's response source)
    sa.Column("history_source", sa.Text),
    sa.PrimaryKeyConstraint("queue", "id", name="archived_jobs_pkey"),
)
_folded_key = archived_jobs.c.history_source.is_not(None)  # version 13
sa.Index("ix_archived_jobs_folded_key", archived_jobs.c.correlation_key,
         postgresql_where=_folded_key, sqlite_where=_folded_key)
sa.Index("ix_archived_jobs_finished", archived_jobs.c.finished_at, archived_jobs.c.queue,
         archived_jobs.c.id)
# version 14, PostgreSQL: partial on a predicate every row meets, so that a probe by
# (queue, id) cannot read it (only the primary key); the readers by queue and time
# state the predicate (postgres.sql, archived_page_queue)
_finished = archived_jobs.c.finished_at.is_not(None)
sa.Index("ix_archived_jobs_queue_finished", archived_jobs.c.queue, archived_jobs.c.finished_at,
         archived_jobs.c.id, postgresql_where=_finished)
_unsucceeded = archived_jobs.c.status != "succeeded"  # version 10
sa.Index("ix_archived_jobs_unsucceeded", archived_jobs.c.status, archived_jobs.c.finished_at,
         archived_jobs.c.queue, archived_jobs.c.id, postgresql_where=_unsucceeded,
         sqlite_where=_unsucceeded)

job_attempts = sa.Table(
    "job_attempts", metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("queue", sa.Text, nullable=False),
    sa.Column("job_id", sa.Text, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("correlation_key", sa.Text),
    sa.Column("launched_at", UTCDateTime),
    sa.Column("finished_at", UTCDateTime, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("error", JSON),
    sa.Column("response", JSON),
)
sa.Index("ix_job_attempts_job", job_attempts.c.queue, job_attempts.c.job_id,
         job_attempts.c.attempt)
sa.Index("ix_job_attempts_key", job_attempts.c.correlation_key)  # version 9

response_inbox = sa.Table(
    "response_inbox", metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("correlation_key", sa.Text, nullable=False),
    sa.Column("attempt", sa.Integer),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("retryable", sa.Boolean),
    sa.Column("result", JSON),
    sa.Column("error", JSON),
    sa.Column("extend_seconds", sa.Float),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("dedup_key", sa.Text, unique=True),
    sa.Column("received_at", UTCDateTime, nullable=False),
    sa.Column("applied_at", UTCDateTime),
    sa.Column("outcome", sa.Text),
    sa.Column("token", sa.Text),  # the job a signed callback URL was issued for
)
_pending = response_inbox.c.applied_at.is_(None)
sa.Index("ix_response_inbox_pending_key", response_inbox.c.correlation_key,
         postgresql_where=_pending, sqlite_where=_pending)
sa.Index("ix_response_inbox_pending_received", response_inbox.c.received_at,
         postgresql_where=_pending, sqlite_where=_pending)
_applied = response_inbox.c.applied_at.is_not(None)  # version 12
sa.Index("ix_response_inbox_applied", response_inbox.c.applied_at,
         postgresql_where=_applied, sqlite_where=_applied)
# Only the few rows marked unmatched are in it (new rows have no outcome yet, so an
# insert adds no entry): the operators' listing of them, newest first.
_unmatched = response_inbox.c.outcome == UNMATCHED
sa.Index("ix_response_inbox_unmatched", response_inbox.c.received_at, response_inbox.c.id,
         postgresql_where=_unmatched, sqlite_where=_unmatched)

launch_events = sa.Table(
    "launch_events", metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("queue", sa.Text, nullable=False),
    sa.Column("group_key", sa.Text, nullable=False),
    sa.Column("launched_at", UTCDateTime, nullable=False),
)
sa.Index("ix_launch_events_queue", launch_events.c.queue, launch_events.c.launched_at)

merged_jobs = sa.Table(
    "merged_jobs", metadata,
    sa.Column("queue", sa.Text, nullable=False),
    sa.Column("id", sa.Text, nullable=False),
    sa.Column("into_id", sa.Text, nullable=False),
    sa.Column("body_hash", sa.Text, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("queue", "id", name="merged_jobs_pkey"),
)

leases = sa.Table(
    "leases", metadata,
    sa.Column("queue", sa.Text, primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("acquired_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
)

# One row per live daemon, refreshed at each lease renewal: the cluster's membership
# (each daemon aims at ceil(queues / live daemons) leases).
daemons = sa.Table(
    "daemons", metadata,
    sa.Column("owner", sa.Text, primary_key=True),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("heartbeat_at", UTCDateTime, nullable=False),
    sa.Column("expires_at", UTCDateTime, nullable=False),
)

# A partner's pause (docs/throttling.md): one row per paused scope of a queue; ``scope`` is ""
# for the whole queue, else "=" and the group's value. Written by the queue's owner,
# read by every daemon (and by the next owner).
queue_backoffs = sa.Table(
    "queue_backoffs", metadata,
    sa.Column("queue", sa.Text, nullable=False),
    sa.Column("scope", sa.Text, nullable=False),
    sa.Column("until", UTCDateTime, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("streak", sa.Integer, nullable=False),
    sa.Column("since", UTCDateTime, nullable=False),
    sa.PrimaryKeyConstraint("queue", "scope", name="queue_backoffs_pkey"),
)

# What the owner of a queue learned of it (docs/throttling.md): the adaptive limit, the due jobs
# it held back at its last tick by reason, its throttled tries; every daemon serves it.
queue_state = sa.Table(
    "queue_state", metadata,
    sa.Column("queue", sa.Text, primary_key=True),
    sa.Column("effective", sa.Float),
    sa.Column("successes", sa.Integer, nullable=False),
    sa.Column("decreased_at", UTCDateTime),
    sa.Column("held", JSON),
    sa.Column("held_at", UTCDateTime),
    sa.Column("throttled_total", BigId, nullable=False),
    sa.Column("learned_rate", sa.Float),
    sa.Column("learned_since", UTCDateTime),
    sa.Column("budget", JSON),
)

# What the owner of a partner's queues sees of the partner (docs/http-api.md, "Partners"):
# its last snapshot, written at most once a second; every daemon serves it.
partner_state = sa.Table(
    "partner_state", metadata,
    sa.Column("partner", sa.Text, primary_key=True),
    sa.Column("snapshot", JSON, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("owner", sa.Text, nullable=False),
)

# The partner's last hour per minute (accepted, refused, in flight at most, learned rate,
# bucket use), added to by its owner, who deletes the rows older than an hour.
partner_minutes = sa.Table(
    "partner_minutes", metadata,
    sa.Column("partner", sa.Text, nullable=False),
    sa.Column("minute", UTCDateTime, nullable=False),
    sa.Column("accepted", BigId, nullable=False),
    sa.Column("refused", BigId, nullable=False),
    sa.Column("in_flight_max", BigId, nullable=False),
    sa.Column("learned_rate", sa.Float),
    sa.Column("buckets", JSON, nullable=False),
    sa.PrimaryKeyConstraint("partner", "minute", name="partner_minutes_pkey"),
)

class IntakeSize(sa.sql.expression.ColumnElement[int]):
    """``job_intake.size``: the bytes of a row's ``data`` and ``fields`` as JSON text
    (PostgreSQL: jsonb's text; SQLite: the stored text), computed by the database as
    the row is written, whoever writes it (docs/from-your-database.md, "Limits")."""

    inherit_cache = True
    type = sa.BigInteger()


@compiles(IntakeSize)
def _intake_size(_element: IntakeSize, _compiler: Any, **_kw: Any) -> str:
    return "length(CAST(data AS BLOB)) + length(CAST(fields AS BLOB))"


@compiles(IntakeSize, "postgresql")
def _intake_size_postgres(_element: IntakeSize, _compiler: Any, **_kw: Any) -> str:
    return "octet_length(data::text) + octet_length(fields::text)"


# Enqueue from SQL (docs/from-your-database.md): what producers insert in their own transactions
# (through hipq_enqueue() or hipq.sql); the owner of the queue ingests the pending rows (error
# NULL) into jobs and deletes them; a row that breaks a rule stays, with its error.
job_intake = sa.Table(
    "job_intake", metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("queue", sa.Text, nullable=False),
    sa.Column("job_id", sa.Text),
    sa.Column("data", JSON, nullable=False),
    sa.Column("run_after", UTCDateTime),
    sa.Column("fields", JSON, nullable=False),
    sa.Column("enqueued_at", UTCDateTime, nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("rejected_at", UTCDateTime),
    sa.Column("size", sa.BigInteger, sa.Computed(IntakeSize(), persisted=True)),
)
_intake_pending = sa.text("error IS NULL")
_intake_rejected = sa.text("error IS NOT NULL")
sa.Index("ix_job_intake_pending", job_intake.c.queue, job_intake.c.id,
         postgresql_where=_intake_pending, sqlite_where=_intake_pending)
sa.Index("ix_job_intake_job", job_intake.c.queue, job_intake.c.job_id,
         postgresql_where=_intake_pending, sqlite_where=_intake_pending)
sa.Index("ix_job_intake_rejected", job_intake.c.rejected_at, job_intake.c.id,
         postgresql_where=_intake_rejected, sqlite_where=_intake_rejected)

meta = sa.Table(
    "hipq_meta", metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)


def render_postgres_ddl() -> str:
    """The canonical PostgreSQL DDL (what ``schema.sql`` holds)."""
    from sqlalchemy.schema import CreateIndex, CreateTable

    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    parts = [f"-- hipq schema version {SCHEMA_VERSION}. Generated from hipq/store/schema.py\n"
             "-- (python -m hipq.store.schema > schema.sql); hipq migrate creates the same\n"
             "-- from hipq/store/migrations/postgresql/."]
    for table in metadata.sorted_tables:
        parts.append(str(CreateTable(table).compile(dialect=dialect)).strip() + ";")
        parts.extend(str(CreateIndex(index).compile(dialect=dialect)).strip() + ";"
                     for index in sorted(table.indexes, key=lambda i: str(i.name)))
    parts.append(enqueue_function())
    return "\n\n".join(parts) + "\n"


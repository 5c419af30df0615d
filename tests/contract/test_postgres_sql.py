"""The named statements of the PostgreSQL driver (``hipq/store/postgres.sql``, its
only SQL): how they are loaded, that each is the driver's, that they keep up with
the schema, and that the server accepts every one of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hipq.jobs import Job
from hipq.store import ChangeKind, Store, postgres
from hipq.store import schema as s
from hipq.store.pgsql import (
    SQL,
    Statement,
    insert_jobs_call,
    insert_jobs_statement,
    insert_jobs_values,
    load,
)
from hipq.store.rows import JOB_COLUMNS
from hipq.testing import FakeClock

pytestmark = pytest.mark.sql_only  # the PostgreSQL driver's statements


def test_named_parameters_become_positions_in_order_of_first_use() -> None:
    statement = Statement.parse("x", "SELECT :b::int, :a, :b, x::text, '::' FROM t WHERE y=:a")
    assert statement.sql == "SELECT $1::int, $2, $1, x::text, '::' FROM t WHERE y=$2"
    assert statement.params == ("b", "a")
    assert statement.args(a=1, b=2) == [2, 1]


@pytest.mark.parametrize("values", [{"a": 1}, {"a": 1, "b": 2, "c": 3}])
def test_args_must_name_every_parameter_and_no_other(values: dict[str, int]) -> None:
    with pytest.raises(TypeError, match="takes \\['a', 'b'\\]"):
        Statement.parse("x", "SELECT :a, :b").args(**values)


def test_blocks_run_to_the_next_name_and_drop_comment_lines() -> None:
    loaded = load("-- header\n-- name: one\n-- about one\nSELECT 1\n\n-- name: two\nSELECT :x\n")
    assert {name: st.sql for name, st in loaded.items()} == {"one": "SELECT 1",
                                                             "two": "SELECT $1"}
    with pytest.raises(ValueError, match="named twice"):
        load("-- name: one\nSELECT 1\n-- name: one\nSELECT 2\n")


def test_every_statement_is_loaded_with_numbered_parameters() -> None:
    assert {"claim", "confirm", "archive", "requeue", "extend", "inbox_insert", "inbox_mark",
            "launch_events", "archive_ran", "due_time", "queue_upsert", "prune"} <= set(SQL)
    for statement in SQL.values():
        assert not re.search(r"(?<![:\w]):[A-Za-z_]", statement.sql), statement.name
        assert "--" not in statement.sql, statement.name


ARCHIVING = ["archive", "archive_ran", "archive_queued", "expire"]
# the statements that fold a try into its archived row (versions 11 and 13)
FOLDING = {"archive_ran", "archive"}


@pytest.mark.parametrize("name", ARCHIVING)
def test_every_archiving_statement_copies_every_column(name: str) -> None:
    insert = re.search(r"INSERT INTO archived_jobs \(([^)]*)\)", SQL[name].sql)
    assert insert is not None
    columns = {c.name for c in s.archived_jobs.columns}
    if name not in FOLDING:
        columns.remove("history_folded")
    if name != "archive":  # the only one whose folded tries say where they ended
        columns.remove("history_source")
    assert {c.strip() for c in insert[1].split(",")} == columns


SHAPES = [("id",), ("id", "token", "data", "body_hash"), tuple(JOB_COLUMNS)]


@pytest.mark.parametrize("per_row", SHAPES)
def test_inserting_jobs_names_every_column_once_or_per_job(per_row: tuple[str, ...]) -> None:
    statement = insert_jobs_statement(per_row, guarded=False)
    insert = re.search(r"INSERT INTO jobs \(([^)]*)\)", statement.sql)
    assert insert is not None
    assert [c.strip() for c in insert[1].split(",")] == JOB_COLUMNS
    expected = {f"{c}_each" for c in per_row} | (set(JOB_COLUMNS) - set(per_row))
    assert set(statement.params) == expected


@pytest.mark.parametrize("per_row", SHAPES)
def test_the_guarded_insert_differs_only_by_on_conflict(per_row: tuple[str, ...]) -> None:
    plain = insert_jobs_statement(per_row, guarded=False)
    guarded = insert_jobs_statement(per_row, guarded=True)
    returning = "RETURNING queue, id"
    assert guarded.sql == plain.sql.replace(returning, f"ON CONFLICT DO NOTHING {returning}")
    assert plain.params == guarded.params


async def test_every_shape_of_insert_prepares(store: Store) -> None:
    if store.dialect != "postgresql":
        pytest.skip("PostgreSQL's statements")
    engine = store.engine  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        for per_row in SHAPES:
            for guarded in (False, True):
                statement = insert_jobs_statement(per_row, guarded=guarded)
                prepared = await raw.prepare(statement.sql)
                assert len(prepared.get_parameters()) == len(statement.params)


def test_a_column_the_batch_shares_travels_once() -> None:
    clock = FakeClock()
    now = clock.now()
    jobs = [Job(id=f"j{i}", queue="q", run_at=now, created_at=now, updated_at=now,
                token=f"t{i}", body_hash="h", data={"n": 1}) for i in range(3)]
    values = insert_jobs_values(jobs)
    sql, args = insert_jobs_call(jobs, guarded=False)
    assert "FROM unnest($30::text[], $31::text[]) AS u(id, token)" in sql  # 2 arrays
    assert args[-2:] == [["j0", "j1", "j2"], ["t0", "t1", "t2"]]
    assert '{"n": 1}' in args  # the shared data: once
    assert (values["queue"], values["queue_each"]) == ("q", None)
    assert (values["data"], values["data_each"]) == ('{"n": 1}', None)
    assert (values["token"], values["token_each"]) == (None, ["t0", "t1", "t2"])
    assert values["id_each"] == ["j0", "j1", "j2"]
    assert (values["expires_at"], values["expires_at_each"]) == (None, None)


def test_json_values_are_compared_as_text() -> None:
    """In Python {"a": 1} == {"a": True}: as one shared value, one would be lost."""
    clock = FakeClock()
    now = clock.now()
    jobs = [Job(id=f"j{i}", queue="q", run_at=now, created_at=now, updated_at=now,
                token="t", body_hash="h", data={"a": value}) for i, value in enumerate([1, True])]
    values = insert_jobs_values(jobs)
    assert values["data_each"] == ['{"a": 1}', '{"a": true}']


def test_every_statement_is_the_drivers() -> None:
    """Each block is named by the driver: literally, or as one of its families."""
    folder = Path(postgres.__file__).parent  # the driver and its mixins
    source = "".join(f.read_text() for f in sorted(folder.glob("postgres*.py")))
    families = {f"due_{group}{order}" for group in ("", "group_")
                for order in ("time", "priority", "critical")}
    families |= {f"archived_page{q}{st}" for q in ("", "_queue") for st in ("", "_status")}
    families |= {f"due_head_{order}" for order in ("time", "priority")}
    families |= {str(kind) for kind in ChangeKind}
    unused = [name for name in SQL if f'"{name}"' not in source and name not in families]
    assert unused == []
    assert {name for name in families if name not in SQL} == set()


async def test_every_statement_prepares_on_a_migrated_database(store: Store) -> None:
    """The server parses, types and plans each block against the schema the
    migrations made (VACUUM is not preparable; it runs in the contract tests)."""
    if store.dialect != "postgresql":
        pytest.skip("PostgreSQL's statements")
    engine = store.engine  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        for name, statement in SQL.items():
            if name != "vacuum":
                prepared = await raw.prepare(statement.sql)
                assert len(prepared.get_parameters()) == len(statement.params), name

"""The named statements of the PostgreSQL driver (``hipq/store/postgres.sql``):
how they are loaded, and that they keep up with the schema."""

from __future__ import annotations

import re

import pytest

from hipq.store import schema as s
from hipq.store.pgsql import SQL, Statement, load


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
            "launch_events"} <= set(SQL)
    for statement in SQL.values():
        assert not re.search(r"(?<![:\w]):[A-Za-z_]", statement.sql), statement.name
        assert "--" not in statement.sql, statement.name


def test_archiving_copies_every_column_of_a_job() -> None:
    """The archive statement names the columns it copies: a column added to the
    schema must be added there too."""
    insert = re.search(r"INSERT INTO archived_jobs \(([^)]*)\)", SQL["archive"].sql)
    assert insert is not None
    copied = {c.strip() for c in insert[1].split(",")}
    assert copied == {c.name for c in s.archived_jobs.columns}

"""The PostgreSQL driver's statements: the named blocks of ``postgres.sql`` with
parameters by name, the INSERT of new jobs (its shape follows the batch), and the
due-jobs query compiled once per shape.

Parameters are passed by name (:meth:`Statement.args`), turned into asyncpg's
positions once at load time, so no call site counts positions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from operator import attrgetter
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from hipq.store import schema as s
from hipq.store.rows import CACHE_SIZE, JOB_COLUMNS

# ":name" (not the second colon of a "::type" cast, nor inside a word)
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_NAME = re.compile(r"^-- name: (\w+)\s*$")


@dataclass(frozen=True, slots=True)
class Statement:
    """A statement for asyncpg: its text with ``$n`` placeholders, and the name of
    each position."""

    name: str
    sql: str
    params: tuple[str, ...]

    @classmethod
    def parse(cls, name: str, text: str) -> Statement:
        """From text with ``:name`` placeholders (a name repeated is one position)."""
        params: list[str] = []

        def position(match: re.Match[str]) -> str:
            if match[1] not in params:
                params.append(match[1])
            return f"${params.index(match[1]) + 1}"

        return cls(name=name, sql=_PARAM.sub(position, text), params=tuple(params))

    def args(self, **values: Any) -> list[Any]:
        """The positional arguments for these named values (all, and only, the
        statement's parameters)."""
        if values.keys() != set(self.params):
            raise TypeError(f"statement {self.name!r} takes {sorted(self.params)}, "
                            f"got {sorted(values)}")
        return [values[name] for name in self.params]


def load(text: str) -> dict[str, Statement]:
    """The named blocks of a SQL file (see the head of ``postgres.sql``)."""
    blocks: dict[str, list[str]] = {}
    lines: list[str] | None = None
    for line in text.splitlines():
        named = _NAME.match(line)
        if named:
            if named[1] in blocks:
                raise ValueError(f"statement {named[1]!r} is named twice")
            lines = blocks[named[1]] = []
        elif lines is not None and not line.lstrip().startswith("--"):
            lines.append(line)
    return {name: Statement.parse(name, "\n".join(body).strip())
            for name, body in blocks.items()}


SQL = load(resources.files("hipq.store").joinpath("postgres.sql").read_text("utf-8"))


def to_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


_dumps = json.dumps


# -- the INSERT of new jobs ----------------------------------------------------------

# The PostgreSQL type of each column type, for ``$n::type`` and ``$n::type[]``.
_PG_TYPES: dict[type[Any], str] = {
    sa.Text: "text", sa.Integer: "int4", sa.Float: "float8", sa.Boolean: "bool",
    sa.BigInteger: "int8",
}


def _pg_type(column: sa.Column[Any]) -> str:
    if isinstance(column.type, s.UTCDateTime):
        return "timestamptz"
    if column.type is s.JSON or isinstance(column.type, sa.JSON):
        return "jsonb"
    for kind, name in _PG_TYPES.items():
        if isinstance(column.type, kind):
            return name
    raise TypeError(f"no PostgreSQL array type for column {column.name}")


_JOB_TYPES = {c.name: _pg_type(c) for c in s.jobs.columns}
_JSON_COLUMNS = frozenset(name for name, kind in _JOB_TYPES.items() if kind == "jsonb")
_ROW_OF_JOB = attrgetter(*JOB_COLUMNS)  # a job's column values, in one call


def _insert_jobs_sql(scalars: frozenset[str], *, guarded: bool) -> str:
    """The INSERT of new jobs where the columns in ``scalars`` take one value for
    the whole batch (``$n``) and the others one array each (``unnest``).

    New jobs, except ids already taken, live (the conflict) or archived (the NOT
    EXISTS): those are answered from what is stored, which is only read when
    something was not inserted. Without ``guarded`` (no ON CONFLICT clause, a
    fifth cheaper for the database) a live id or key in use fails the statement."""
    select, arrays, names = [], [], []
    for n, column in enumerate(JOB_COLUMNS, start=1):
        kind = _JOB_TYPES[column]
        sent = "text" if kind == "jsonb" else kind
        value = f"${n}::{sent}" if column in scalars else f"u.{column}"
        if column not in scalars:
            arrays.append(f"${n}::{sent}[]")
            names.append(column)
        select.append(f"{value}::jsonb" if kind == "jsonb" else value)
    value_of = dict(zip(JOB_COLUMNS, select, strict=True))
    return (f"INSERT INTO jobs ({', '.join(JOB_COLUMNS)}) SELECT {', '.join(select)} "
            f"FROM unnest({', '.join(arrays)}) AS u({', '.join(names)}) "
            f"WHERE NOT EXISTS (SELECT 1 FROM archived_jobs a "
            f"WHERE a.queue = {value_of['queue']} AND a.id = u.id) "
            f"{'ON CONFLICT DO NOTHING ' if guarded else ''}RETURNING queue, id")


@dataclass(frozen=True, slots=True)
class InsertJobs:
    """:func:`insert_jobs`: the statement (``guarded``: ON CONFLICT DO NOTHING;
    ``plain``: without, failing on a live id or key in use) and its parameters,
    one per column of ``jobs`` in order."""

    guarded: str
    plain: str
    params: list[Any]


_INSERT_SQL: dict[frozenset[str], tuple[str, str]] = {}


def insert_jobs(jobs: Sequence[Any]) -> InsertJobs:
    """The INSERT of these jobs and its parameters: a column whose value is the
    same for every job (the queue, the status, most of the settings) travels once,
    the others as arrays. The driver checks every array element it encodes, so a
    batch of new jobs costs a few arrays instead of thirty."""
    scalars: set[str] = set()
    params: list[Any] = []
    for name, column in zip(JOB_COLUMNS, zip(*map(_ROW_OF_JOB, jobs), strict=True),
                            strict=True):
        values = list(column)
        if name in _JSON_COLUMNS:  # compared as text: in Python, {"a": 1} == {"a": True}
            values = [None if v is None else _dumps(v) for v in values]
        first = values[0]
        if name != "id" and values.count(first) == len(values):
            scalars.add(name)
            params.append(first)
        else:
            params.append(values)
    shape = frozenset(scalars)
    sql = _INSERT_SQL.get(shape)
    if sql is None:
        if len(_INSERT_SQL) >= CACHE_SIZE:  # statement shapes: in practice a handful
            _INSERT_SQL.clear()
        sql = _INSERT_SQL[shape] = (_insert_jobs_sql(shape, guarded=True),
                                    _insert_jobs_sql(shape, guarded=False))
    return InsertJobs(guarded=sql[0], plain=sql[1], params=params)


# -- SQLAlchemy statements compiled once for asyncpg ------------------------------------


@dataclass(frozen=True, slots=True)
class Compiled:
    """A SQLAlchemy statement compiled once for asyncpg: its text and its parameters
    in order, with the values it was built with (``params`` replaces some)."""

    sql: str
    names: tuple[str, ...]
    values: dict[str, Any]

    def params(self, replace: dict[str, Any]) -> list[Any]:
        return [replace[n] if n in replace else self.values[n] for n in self.names]


def compile_select(stmt: sa.Select[Any], dialect: Dialect) -> Compiled:
    """``stmt`` for asyncpg, its expanding lists rendered. The values it keeps are
    passed as they are, with no type processing: the due query's only processed
    parameter is its ``now``, which each call replaces (an aware datetime, which
    asyncpg takes as it is)."""
    compiled = stmt.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    return Compiled(sql=compiled.string, names=tuple(compiled.positiontup or ()),
                    values=dict(compiled.construct_params()))

"""The PostgreSQL driver's statements: the named blocks of ``postgres.sql`` with
parameters by name, and the values some of them take (new jobs as columns).

Parameters are passed by name (:meth:`Statement.args`), turned into asyncpg's
positions once at load time, so no call site counts positions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from operator import attrgetter
from typing import Any

from hipq import json_text
from hipq.store.columns import JOB_COLUMN_SPECS, JSON_JOB_COLUMNS, TRACE
from hipq.store.rows import JOB_COLUMNS

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
    return None if value is None else _dumps(value)


_dumps = json_text.dumps  # json.dumps, its C encoder built once
_JSON_COLUMNS = JSON_JOB_COLUMNS
_ROW_OF_JOB = attrgetter(*JOB_COLUMNS)  # a job's column values, in one call


def insert_jobs_values(jobs: Sequence[Any],
                       data_texts: Sequence[str] | None = None) -> dict[str, Any]:
    """The values of ``insert_jobs`` for these jobs: per column, the one value every
    job has (``col``; ``col_each`` None), else one per job (``col_each``; ``col``
    None). JSON values go as text, compared as text (in Python, {"a": 1} equals
    {"a": True}); ``data_texts``, if given, are the JSON texts of the jobs' data
    (:class:`~hipq.jobs.NewJobs`), sent as they are. Ids are always one per job."""
    values: dict[str, Any] = {}
    for name, column in zip(JOB_COLUMNS, zip(*map(_ROW_OF_JOB, jobs), strict=True),
                            strict=True):
        if name == "data" and data_texts is not None:
            each = list(data_texts)
        else:
            each = list(column)
            if name in _JSON_COLUMNS:
                each = [None if v is None else _dumps(v) for v in each]
        if name == "id":
            values["id"], values["id_each"] = None, each
            continue
        first = each[0]
        if each.count(first) == len(each):
            values[name], values[f"{name}_each"] = first, None
        else:
            values[name], values[f"{name}_each"] = None, each
    return values


# -- new jobs: one INSERT per shape of batch ---------------------------------------------

_SQL_TYPES = {"text": "text", "json": "text", "time": "timestamptz", "int": "int4",
              "bool": "bool", "float": "float8"}
_KINDS = {c.name: c.kind for c in (*JOB_COLUMN_SPECS, TRACE)}
_TYPES = {name: _SQL_TYPES[kind] for name, kind in _KINDS.items()}


# between the values of a text column sent as one text (:func:`insert_jobs_call`):
# no JSON text holds a raw control character (encoders escape them), no job id, token
# or body hash holds one, and any other text that does goes as an array
PACK_SEPARATOR = "\x1e"
_TEXT_KINDS = frozenset({"text", "json"})


@lru_cache(maxsize=64)
def insert_jobs_statement(per_row: tuple[str, ...], *, guarded: bool,
                          packed: tuple[str, ...] = ()) -> Statement:
    """The INSERT of new jobs whose columns ``per_row`` come one value per job (an
    array each, unnested) and every other column one value for the whole batch
    (a parameter of its own). A batch of the usual shape sends four arrays, not 31
    of which 27 are NULL and COALESCEd row by row. The columns ``packed`` (some of
    ``per_row``, of text) come as one text each, their values joined by
    :data:`PACK_SEPARATOR` and split by the server. An id already archived is not
    inserted (the NOT EXISTS: the caller answers it as a repeat). ``guarded``: with
    ON CONFLICT DO NOTHING (live ids and keys in use are left out); without it,
    such a row fails the statement (a fifth cheaper for the database when there is
    none), which the caller then runs guarded. Ids always come per row."""
    assert "id" in per_row
    assert set(packed) <= set(per_row)
    names = list(_TYPES)
    values = []
    for name in names:
        kind = _TYPES[name]
        value = f"u.{name}" if name in per_row else f":{name}::{kind}"
        values.append(f"{value}::jsonb" if name in JSON_JOB_COLUMNS else value)
    arrays = ", ".join(f"string_to_array(:{name}_each::text, chr({ord(PACK_SEPARATOR)}))"
                       if name in packed else f":{name}_each::{_TYPES[name]}[]"
                       for name in per_row)
    queue = "u.queue" if "queue" in per_row else ":queue::text"
    text = (f"INSERT INTO jobs ({', '.join(names)})\n"
            f"SELECT {', '.join(values)}\n"
            f"FROM unnest({arrays}) AS u({', '.join(per_row)})\n"
            # a probe per row on the primary key (OFFSET 0 keeps it a subplan): as an
            # anti-join, the generic plan (the array taken for 10 rows) rescanned a
            # young archive materialized for every row, a custom one hashed it whole
            f"WHERE NOT EXISTS (SELECT 1 FROM archived_jobs a WHERE a.queue = {queue} "
            f"AND a.id = u.id OFFSET 0)\n"
            f"{'ON CONFLICT DO NOTHING ' if guarded else ''}RETURNING queue, id")
    return Statement.parse("insert_jobs_guarded" if guarded else "insert_jobs", text)


def insert_jobs_call(jobs: Sequence[Any], *, guarded: bool,
                     data_texts: Sequence[str] | None = None,
                     packed: bool = False) -> tuple[str, list[Any]]:
    """The statement and arguments that insert these jobs (:func:`insert_jobs_values`
    decides which columns go per row). With ``packed``, each per-row column of text
    whose values :func:`pack` can join goes as one text (asyncpg checks each value
    of an array in Python: three times the CPU for the usual batch)."""
    values = insert_jobs_values(jobs, data_texts)
    per_row = tuple(n for n in JOB_COLUMNS if values[f"{n}_each"] is not None)
    joined: list[str] = []
    if packed:
        for name in per_row:
            text = pack(values[f"{name}_each"]) if _KINDS[name] in _TEXT_KINDS else None
            if text is not None:
                values[f"{name}_each"] = text
                joined.append(name)
    statement = insert_jobs_statement(per_row, guarded=guarded, packed=tuple(joined))
    args = {p: values[p] for p in statement.params}
    return statement.sql, statement.args(**args)


def pack(texts: list[Any]) -> str | None:
    """``texts`` joined by :data:`PACK_SEPARATOR`, which the server splits back
    into the same list; None if it would not (a NULL, a text holding the
    separator, or one empty text: ``string_to_array('', ...)`` is empty)."""
    try:
        joined = PACK_SEPARATOR.join(texts)
    except TypeError:  # a NULL
        return None
    if not joined or joined.count(PACK_SEPARATOR) != len(texts) - 1:
        return None
    return joined

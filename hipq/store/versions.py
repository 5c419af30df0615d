"""The schema's version and the numbered migration files that make it, read as plain
text: no SQLAlchemy (the PostgreSQL driver runs them as SQL scripts).

Each database gets its schema from numbered SQL files, one per version
(``hipq/store/migrations/postgresql/`` and ``hipq/store/migrations/sqlite/``),
applied in order by ``Store.migrate()``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from hipq.errors import SchemaError

SCHEMA_VERSION = 17  # the number of the last file in migrations/<dialect>/


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered file of ``hipq/store/migrations/<dialect>/``: the statements that
    take a database from ``version - 1`` to ``version``."""

    version: int
    name: str
    sql: str


_MIGRATION_FILE = re.compile(r"(\d{4})_\w+\.sql")


@cache
def migrations(dialect: str) -> tuple[Migration, ...]:
    """The migrations of ``dialect`` (``"postgresql"`` or ``"sqlite"``) in order:
    one file per version, numbered 1 to :data:`SCHEMA_VERSION` without a gap."""
    folder = resources.files("hipq.store").joinpath("migrations").joinpath(dialect)
    found = sorted(
        (Migration(version=int(match[1]), name=entry.name, sql=entry.read_text("utf-8"))
         for entry in folder.iterdir() if (match := _MIGRATION_FILE.fullmatch(entry.name))),
        key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, SCHEMA_VERSION + 1)):
        raise RuntimeError(f"the {dialect} migrations are numbered "
                           f"{[m.name for m in found]}, not 1 to {SCHEMA_VERSION}")
    return tuple(found)


def pending(dialect: str, current: int | None) -> list[Migration]:
    """What takes a database at version ``current`` (None: nothing recorded, e.g.
    empty) to :data:`SCHEMA_VERSION`.

    Raises:
        SchemaError: the database is newer than this hipq.
    """
    if current is not None and current > SCHEMA_VERSION:
        raise SchemaError(f"database schema version {current} is newer than this "
                          f"hipq ({SCHEMA_VERSION}); upgrade hipq")
    return [m for m in migrations(dialect) if current is None or m.version > current]


def enqueue_function() -> str:
    """The DDL of ``hipq_enqueue()`` and ``hipq_enqueue_many()`` (docs/from-your-database.md), their
    search_path and grants, as the last migration that makes them has it."""
    marker = "CREATE OR REPLACE FUNCTION hipq_enqueue("
    script = [m.sql for m in migrations("postgresql") if marker in m.sql][-1]
    before = script[:script.index(marker)].splitlines()
    comment = len(before)  # the comment lines just above the first function go with it
    while comment and before[comment - 1].startswith("--"):
        comment -= 1
    return "\n".join([*before[comment:], script[script.index(marker):].strip()])

"""A PostgreSQL ``database.url`` as asyncpg takes it (hipq.store.pg_url): the DSN keeps
what asyncpg's own parser reads (hosts, port, user, password, database, libpq
parameters such as ``sslmode``, server settings); ``ssl`` and ``direct_tls`` become
keywords of ``asyncpg.connect``, as SQLAlchemy passed them; SQLAlchemy's own
``prepared_statement_cache_size`` is dropped."""

from __future__ import annotations

import pytest

from hipq.store.pg_url import connect_options


@pytest.mark.parametrize(("url", "dsn", "keywords"), [
    ("postgresql+asyncpg://u:p%40x@h:5432/db", "postgresql://u:p%40x@h:5432/db", {}),
    ("postgresql://u@h/db?sslmode=require", "postgresql://u@h/db?sslmode=require", {}),
    ("postgresql+asyncpg://u@h/db?ssl=require&application_name=hipq",
     "postgresql://u@h/db?application_name=hipq", {"ssl": "require"}),
    ("postgresql+asyncpg://u@h/db?prepared_statement_cache_size=500",
     "postgresql://u@h/db", {}),
    ("postgresql+asyncpg://u@h1:5432,h2:5433/db?target_session_attrs=read-write",
     "postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write", {}),
    ("postgresql+asyncpg://u@[::1]:5432/db", "postgresql://u@[::1]:5432/db", {}),
    ("postgresql+asyncpg:///db?host=/var/run/postgresql",
     "postgresql:///db?host=%2Fvar%2Frun%2Fpostgresql", {}),
    ("postgres://u@h/db?direct_tls=true", "postgresql://u@h/db", {"direct_tls": "true"}),
])
def test_connect_options(url: str, dsn: str, keywords: dict[str, str]) -> None:
    assert connect_options(url) == (dsn, keywords)


@pytest.mark.parametrize("url", ["postgresql+asyncpg://u@h:port/db",
                                 "postgresql+asyncpg://u@h1:5432,h2:x/db",
                                 "postgresql+psycopg://u@h/db", "mysql://u@h/db"])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        connect_options(url)

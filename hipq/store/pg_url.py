"""A PostgreSQL ``database.url`` as asyncpg takes it: a libpq-style DSN, plus the
keywords of :func:`asyncpg.connect` that a URL may carry.

``postgresql+asyncpg://user:password@host:port/db?sslmode=require`` becomes the DSN
``postgresql://user:password@host:port/db?sslmode=require``: asyncpg reads the host
(several, comma-separated, or a socket directory in ``?host=``), the port, the user,
the password, the database and the libpq parameters (``sslmode``, ``sslrootcert``,
``target_session_attrs``, ...) from it, and sends any other query parameter to the
server as a setting (``application_name``...). Two parameters are keywords of
``asyncpg.connect`` rather than libpq names: ``ssl`` (``?ssl=require``, the spelling
SQLAlchemy's asyncpg dialect documents) and ``direct_tls``; they are passed as such.
``prepared_statement_cache_size`` was SQLAlchemy's own setting and is dropped
(asyncpg's statement cache is the one that runs hipq's statements).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

SCHEMES = ("postgresql", "postgresql+asyncpg", "postgres")
KEYWORDS = frozenset({"ssl", "direct_tls"})  # query parameters that are connect() keywords
DROPPED = frozenset({"prepared_statement_cache_size"})


def connect_options(url: str) -> tuple[str, dict[str, Any]]:
    """(the DSN, the keyword arguments) of ``asyncpg.connect`` for ``url``.

    Raises:
        ValueError: not a PostgreSQL URL asyncpg can use, or a malformed port.
    """
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(f"not a postgresql+asyncpg:// URL: {parts.scheme}://...")
    _check_ports(parts.netloc.rpartition("@")[2])
    query = parse_qsl(parts.query, keep_blank_values=True)
    keywords = {key: value for key, value in query if key in KEYWORDS}
    rest = [(key, value) for key, value in query if key not in KEYWORDS | DROPPED]
    query_text = urlencode(rest)
    dsn = f"postgresql://{parts.netloc}{parts.path}{'?' if query_text else ''}{query_text}"
    return dsn, keywords


def _check_ports(hosts: str) -> None:
    """Each ``host:port`` of a (comma-separated) host list has a numeric port."""
    for host in hosts.split(","):
        port = host.rpartition("]")[2] if host.startswith("[") else host
        if ":" in port:
            number = port.rpartition(":")[2]
            if number and not number.isdigit():
                raise ValueError(f"the port {number!r} is not a number")

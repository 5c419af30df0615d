"""Shared fixtures: throwaway PostgreSQL / Kafka, and stores on both databases.

PostgreSQL comes from ``HIPQ_TEST_DATABASE_URL`` (set by ``scripts/test``) or, for a
bare ``pytest`` run, from ``scripts/pg-ephemeral`` started for the session. A
template database is migrated once; each test gets ``CREATE DATABASE ... TEMPLATE``
(Procrastinate's pattern), dropped afterwards. With ``CI`` set, a missing PostgreSQL
fails the run instead of skipping.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import asyncpg
import hypothesis
import pytest

from hipq.store import Store, open_store
from hipq.testing import FakeClock, migrate_database

# CI replays the same examples on every run (a red CI is then a real regression,
# reproducible locally with HYPOTHESIS_PROFILE=ci); developers get fresh ones.
hypothesis.settings.register_profile("ci", derandomize=True, print_blob=True)
hypothesis.settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default"))

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
TEMPLATE_DB = "hipq_template"
BACKENDS = ["sqlite", "postgresql"]  # the databases
MEMORY = "memory"  # the store kept in memory (hipq.store.memory): a test double

_db_numbers = itertools.count()


def _start_service(tool: str, env_var: str) -> tuple[str, Callable[[], None] | None]:
    """The service's address from ``env_var``, else from a started ``scripts/<tool>``
    (with the function that stops it)."""
    if os.environ.get(env_var):
        return os.environ[env_var], None
    name = f"hipq-pytest-{os.getpid()}"
    env = dict(os.environ, PG_EPHEMERAL_NAME=name, KAFKA_EPHEMERAL_NAME=name,
               PYTHON=sys.executable)
    tool_path = str(SCRIPTS / tool)

    def stop() -> None:
        subprocess.run([tool_path, "stop"], env=env, timeout=60, check=False,
                       capture_output=True)

    try:
        out = subprocess.run([tool_path, "start"], env=env, check=True, capture_output=True,
                             text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        stop()
        detail = getattr(exc, "stderr", None) or exc
        message = f"{env_var} is not set and scripts/{tool} could not start: {detail}"
        if os.environ.get("CI"):
            pytest.fail(f"CI: {message}", pytrace=False)
        pytest.skip(message)
    return out.strip().splitlines()[-1].split("=", 1)[1], stop


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A PostgreSQL server URL (``postgresql://...``, database ``postgres``)."""
    url, stop = _start_service("pg-ephemeral", "HIPQ_TEST_DATABASE_URL")
    yield url
    if stop is not None:
        stop()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A Kafka bootstrap address (``127.0.0.1:PORT``)."""
    bootstrap, stop = _start_service("kafka-ephemeral", "HIPQ_TEST_KAFKA_BOOTSTRAP")
    yield bootstrap
    if stop is not None:
        stop()


def _with_database(server_url: str, database: str, *, driver: str = "") -> str:
    base, _, _ = server_url.rpartition("/")
    scheme, rest = base.split("://", 1)
    return f"{scheme}{driver}://{rest}/{database}"


async def _admin(pg_url: str, *statements: str) -> None:
    conn = await asyncpg.connect(pg_url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
async def pg_template(pg_url: str) -> AsyncIterator[str]:
    """Name of a migrated template database, made once per session."""
    await _admin(pg_url, f"DROP DATABASE IF EXISTS {TEMPLATE_DB} WITH (FORCE)",
                 f"CREATE DATABASE {TEMPLATE_DB}")
    await migrate_database(_with_database(pg_url, TEMPLATE_DB, driver="+asyncpg"))
    yield TEMPLATE_DB
    await _admin(pg_url, f"DROP DATABASE IF EXISTS {TEMPLATE_DB} WITH (FORCE)")


async def _pg_database(pg_url: str, template: str) -> AsyncIterator[str]:
    name = f"test_{os.getpid()}_{next(_db_numbers)}"
    await _admin(pg_url, f"CREATE DATABASE {name} TEMPLATE {template}")
    try:
        yield _with_database(pg_url, name, driver="+asyncpg")
    finally:
        await _admin(pg_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sql_only: runs on the databases (BACKENDS) only, never on the store in "
        "memory: the test reads what a SQL driver wrote in its tables, or checks its SQL")


@pytest.fixture(params=BACKENDS, ids=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The database a test runs on. PostgreSQL's server and template are resolved
    here, in a sync fixture, so that the async fixtures below never have to. A
    folder whose tests run on the store in memory too (or instead) overrides this
    fixture with :func:`backend_of` and parametrizes it (:func:`backends_for`)."""
    return backend_of(request)


def backend_of(request: pytest.FixtureRequest) -> str:
    if request.param == "postgresql":
        request.getfixturevalue("pg_template")
    return str(request.param)


def backends_for(metafunc: pytest.Metafunc, default: list[str]) -> None:
    """Parametrize the test's ``backend`` (for a folder whose ``backend`` fixture has
    no params of its own): ``default``, or the databases alone for a test marked
    ``sql_only`` or needing a database URL (``db_url``); left as it is where the test
    names its backends itself (a ``parametrize`` mark on ``backend``)."""
    if "backend" not in metafunc.fixturenames or any(
            "backend" in str(mark.args[0]) for mark in
            metafunc.definition.iter_markers("parametrize")):
        return
    names = (BACKENDS if metafunc.definition.get_closest_marker("sql_only")
             or "db_url" in metafunc.fixturenames else default)
    metafunc.parametrize("backend", names, indirect=True, ids=names)


async def _migrated_url(backend: str, request: pytest.FixtureRequest,
                        tmp_path: Path) -> AsyncIterator[str]:
    """A fresh migrated database URL on ``backend`` (``memory://``: a new store at
    each open)."""
    if backend == MEMORY:
        yield "memory://"
        return
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path}/hipq.db"
        await migrate_database(url)
        yield url
        return
    pg_url = request.getfixturevalue("pg_url")  # already set up by ``backend``
    async for url in _pg_database(pg_url, TEMPLATE_DB):
        yield url


@pytest.fixture
async def db_url(backend: str, request: pytest.FixtureRequest,
                 tmp_path: Path) -> AsyncIterator[str]:
    """A migrated database URL on each backend; no store is kept open."""
    async for url in _migrated_url(backend, request, tmp_path):
        yield url


@pytest.fixture
async def store(backend: str, request: pytest.FixtureRequest,
                tmp_path: Path) -> AsyncIterator[Store]:
    """A migrated store on each backend; fails the test if a pooled connection leaked."""
    async for url in _migrated_url(backend, request, tmp_path):
        opened = await open_store(url)
        try:
            yield opened
            leaked = opened.checked_out()  # type: ignore[attr-defined]
            assert leaked == 0, f"{leaked} pooled connection(s) still checked out"
        finally:
            await opened.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()

"""Shared fixtures: throwaway PostgreSQL / Kafka, and stores on both databases.

PostgreSQL comes from ``HIPQ_TEST_DATABASE_URL`` (set by ``scripts/test``) or, for a
bare ``pytest`` run, from ``scripts/pg-ephemeral`` started for the session. A
template database is migrated once per session; each test gets ``CREATE DATABASE
... TEMPLATE`` (Procrastinate's pattern), made while the test before it runs and
dropped while the test after it runs (:class:`Databases`). SQLite's schema is
migrated once per session into a file that each test gets a copy of. With ``CI``
set, a missing PostgreSQL fails the run instead of skipping.

Under pytest-xdist (``scripts/test`` runs ``-n``) every session fixture is made per
worker, and whatever the workers share (the PostgreSQL server, the Kafka broker)
is named per worker: database names carry :data:`WORKER` and the process id.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
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
# pytest-xdist's worker ("gw0", "gw1", ...), "main" in a run without workers
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
TEMPLATE_DB = f"hipq_template_{WORKER}_{os.getpid()}"
BACKENDS = ["sqlite", "postgresql"]  # the databases
MEMORY = "memory"  # the store kept in memory (hipq.store.memory): a test double


def _start_service(tool: str, env_var: str | None,
                   name: str = "") -> tuple[str, Callable[[], None] | None]:
    """The service's address from ``env_var``, else from a started ``scripts/<tool>``
    (with the function that stops it)."""
    if env_var is not None and os.environ.get(env_var):
        return os.environ[env_var], None
    name = name or f"hipq-pytest-{os.getpid()}"
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
        message = (f"{env_var} is not set and " if env_var else "") + (
            f"scripts/{tool} could not start: {detail}")
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
def alone_pg_url() -> Iterator[str]:
    """A PostgreSQL server of this worker's own (``scripts/pg-ephemeral``, started when
    a test marked ``alone_on_server`` first needs it), for tests that a database
    made meanwhile on the shared server would disturb: while any session runs
    ``CREATE DATABASE``, PostgreSQL prunes no page and vacuums no row version that
    another database's transactions left behind, so a HOT update finds no room."""
    url, stop = _start_service("pg-ephemeral", None, name=f"hipq-alone-{WORKER}-{os.getpid()}")
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


async def _template(server_url: str) -> AsyncIterator[str]:
    await _admin(server_url, f"DROP DATABASE IF EXISTS {TEMPLATE_DB} WITH (FORCE)",
                 f"CREATE DATABASE {TEMPLATE_DB}")
    await migrate_database(_with_database(server_url, TEMPLATE_DB, driver="+asyncpg"))
    yield TEMPLATE_DB
    await _admin(server_url, f"DROP DATABASE IF EXISTS {TEMPLATE_DB} WITH (FORCE)")


@pytest.fixture(scope="session")
async def pg_template(pg_url: str) -> AsyncIterator[str]:
    """Name of a migrated template database, made once per session (per worker)."""
    async for name in _template(pg_url):
        yield name


class Databases:
    """The tests' PostgreSQL databases, each a copy of the template, on one admin
    connection: the next one is made while a test runs, and a finished test's is
    dropped while the next runs. A copy takes 50 ms of the server's time on a quiet
    machine and up to a second on a busy one; the test no longer waits for it."""

    def __init__(self, server_url: str, template: str, *, ahead: bool = True) -> None:
        self.server_url = server_url
        self.template = template
        self.ahead = ahead  # make the next database while a test runs
        self._numbers = itertools.count()
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()  # one statement at a time on the connection
        self._next: asyncio.Task[str] | None = None
        self._drops: set[asyncio.Task[None]] = set()
        self.failed_drops: list[str] = []

    async def open(self) -> None:
        self._conn = await asyncpg.connect(self.server_url)

    async def _execute(self, statement: str) -> None:
        assert self._conn is not None, "Databases.open() first"
        async with self._lock:
            await self._conn.execute(statement)

    async def _create(self) -> str:
        name = f"test_{WORKER}_{os.getpid()}_{next(self._numbers)}"
        await self._execute(f"CREATE DATABASE {name} TEMPLATE {self.template}")
        return name

    async def take(self) -> str:
        """A new database's name (the one made ahead, if any); the next is begun."""
        made, self._next = self._next, None
        name = await (made if made is not None else self._create())
        if self.ahead:
            self._next = asyncio.create_task(self._create())
        return name

    def drop(self, name: str) -> None:
        """Drop ``name`` in the background (its connections closed by force); a drop
        that fails fails the session at :meth:`close`."""
        task = asyncio.create_task(self._drop(name))
        self._drops.add(task)
        task.add_done_callback(self._drops.discard)

    async def _drop(self, name: str) -> None:
        try:
            await self._execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        except Exception as exc:
            self.failed_drops.append(f"{name}: {exc!r}")

    async def close(self) -> None:
        if self._next is not None:
            self.drop(await self._next)
        await asyncio.gather(*self._drops)
        if self._conn is not None:
            await self._conn.close()
        assert not self.failed_drops, f"databases not dropped: {self.failed_drops}"


@pytest.fixture(scope="session")
async def pg_databases(pg_url: str, pg_template: str) -> AsyncIterator[Databases]:
    """The source of each test's PostgreSQL database (:class:`Databases`)."""
    databases = Databases(pg_url, pg_template)
    await databases.open()
    yield databases
    await databases.close()


@pytest.fixture(scope="session")
async def alone_databases(alone_pg_url: str) -> AsyncIterator[Databases]:
    """The databases of the tests marked ``alone_on_server``: on
    :func:`alone_pg_url`'s server, each made when its test starts (never while one
    runs)."""
    async for template in _template(alone_pg_url):
        databases = Databases(alone_pg_url, template, ahead=False)
        await databases.open()
        yield databases
        await databases.close()


async def _pg_database(databases: Databases) -> AsyncIterator[str]:
    name = await databases.take()
    try:
        yield _with_database(databases.server_url, name, driver="+asyncpg")
    finally:
        databases.drop(name)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per session (per worker); each test's database is
    a copy of it (mode 0600, as the store creates it). The migration runs on a loop
    of its own, in a thread: this fixture may be first asked for by an async one."""
    path = tmp_path_factory.mktemp("sqlite-template") / "hipq.db"
    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, migrate_database(f"sqlite+aiosqlite:///{path}")).result()
    assert not list(path.parent.glob("hipq.db-*")), "the template was not closed cleanly"
    return path


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sql_only: runs on the databases (BACKENDS) only, never on the store in "
        "memory: the test reads what a SQL driver wrote in its tables, or checks its SQL")
    config.addinivalue_line(
        "markers", "alone_on_server: on PostgreSQL, the test's database is on a server of "
        "the worker's own, where no database is made while it runs (page pruning, vacuum)")


# Folders whose tests share something costly made once per worker: under pytest-xdist
# (``--dist loadgroup``) each goes to one worker whole. The browser tests share one
# Chromium (tests/browser/conftest.py).
WORKER_GROUPS = ("browser",)
# Folders whose every test is ``slow``: real hipq processes, a cluster, the Kafka
# broker (elsewhere a module says so itself with ``pytestmark``).
SLOW_FOLDERS = ("e2e", "kafka", "kit", "scale")


def pytest_itemcollected(item: pytest.Item) -> None:
    """The tests of each of :data:`WORKER_GROUPS` in one pytest-xdist group (marked
    here, before pytest-xdist reads the marks); those of :data:`SLOW_FOLDERS` slow."""
    folder = item.path.parent.name
    if folder in WORKER_GROUPS:
        item.add_marker(pytest.mark.xdist_group(folder))
    if folder in SLOW_FOLDERS:
        item.add_marker(pytest.mark.slow)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering (by fixture scope)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a pytest-xdist worker, the tests marked ``slow`` first (stable otherwise):
    the workers start on the longest and end on short ones, rather than one worker
    running a long test alone at the end. A run without workers keeps its order."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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


@pytest.fixture
def database_source(backend: str, request: pytest.FixtureRequest) -> Databases | Path | None:
    """What the test's database on ``backend`` is made from: :class:`Databases`
    (PostgreSQL), the migrated SQLite file, None for the store in memory. Session
    fixtures are set up here, in a sync fixture: an async fixture cannot set one up
    (the loop is running then), whoever chose the backend."""
    if backend == "postgresql":
        alone = request.node.get_closest_marker("alone_on_server") is not None
        return request.getfixturevalue("alone_databases" if alone else "pg_databases")
    if backend == "sqlite":
        return request.getfixturevalue("sqlite_template")
    return None


async def _migrated_url(source: Databases | Path | None, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh migrated database URL made from ``source`` (``memory://``: a new store
    at each open; SQLite: a copy of the migrated template file)."""
    if source is None:
        yield "memory://"
    elif isinstance(source, Path):
        path = tmp_path / "hipq.db"
        shutil.copy(source, path)
        yield f"sqlite+aiosqlite:///{path}"
    else:
        async for url in _pg_database(source):
            yield url


@pytest.fixture
async def db_url(database_source: Databases | Path | None,
                 tmp_path: Path) -> AsyncIterator[str]:
    """A migrated database URL on each backend; no store is kept open."""
    async for url in _migrated_url(database_source, tmp_path):
        yield url


@pytest.fixture
async def store(database_source: Databases | Path | None,
                tmp_path: Path) -> AsyncIterator[Store]:
    """A migrated store on each backend; fails the test if a pooled connection leaked."""
    async for url in _migrated_url(database_source, tmp_path):
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

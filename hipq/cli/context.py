"""What every command shares: loading the config, logging, the store, output."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from hipq.config import DEFAULT_CONFIG_FILE, Settings, load_config, sqlite_file
from hipq.errors import ConfigError, StoreError
from hipq.log import setup_logging
from hipq.store import Store, open_store

T = TypeVar("T")
AsyncCommand = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]


def settings_of(args: argparse.Namespace) -> Settings:
    settings = load_config(args.config)
    setup_logging(settings.logging.level, settings.logging.json_format)
    return settings


def run_command(args: argparse.Namespace, command: AsyncCommand, *,
                daemon: bool = False) -> int:
    """Load the config named by ``args`` and run ``command`` in an event loop: the
    configured one (``event_loop``) for the ``daemon``, asyncio's own otherwise."""
    settings = settings_of(args)
    factory = loop_factory(settings.event_loop) if daemon else None
    with asyncio.Runner(loop_factory=factory) as runner:
        try:
            return runner.run(command(args, settings))
        except NoDatabase as exc:
            raise StoreError(no_database_message(exc.path, args.config)) from None


class NoDatabase(StoreError):
    """The SQLite file a command would read or change does not exist (it is not
    created: only ``hipq migrate`` and ``hipq run`` create a database)."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"no database at {path}")
        self.path = path


def missing_sqlite_file(settings: Settings) -> Path | None:
    """The configured SQLite file if it does not exist yet, else None."""
    name = sqlite_file(settings.database.url)
    if name is None or Path(name).exists():
        return None
    return Path(name).absolute()


def no_database_message(path: Path, config: str | None) -> str:
    """What to do when there is no database: say whether a config was found at all."""
    if config is None and not Path(DEFAULT_CONFIG_FILE).exists():
        return (f"no config here (no -c FILE, no $HIPQ_CONFIG, no ./{DEFAULT_CONFIG_FILE}) "
                f"and no database ({path.name}): nothing to show. Write a "
                f"{DEFAULT_CONFIG_FILE} (see the README's tour) or pass -c FILE; 'hipq "
                "migrate' or 'hipq run' creates the database")
    return (f"no database at {path} (config {config or './' + DEFAULT_CONFIG_FILE}): "
            "run 'hipq migrate' or 'hipq run' to create it")


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop for ``uvloop`` and, where uvloop is installed, for ``auto``;
    None (asyncio's own loop) otherwise. uvloop runs the sockets (API, callbacks,
    launches, PostgreSQL) in libuv: about a tenth less CPU per HTTP round trip."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError("event_loop is uvloop, but uvloop is not installed "
                              "(pip install uvloop), or set event_loop: auto") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


async def with_store(settings: Settings, fn: Callable[[Store], Awaitable[T]], *,
                     migrate: bool = False) -> T:
    """Open the configured database (checking its schema, or migrating it), run
    ``fn`` with it, close it. Only ``migrate`` creates a SQLite file: without it a
    missing file is :class:`NoDatabase` and nothing is written."""
    if not migrate and (missing := missing_sqlite_file(settings)) is not None:
        raise NoDatabase(missing)
    store = await open_store(settings.database.url, pool_size=2)
    try:
        await reach(store, settings)
        if migrate:
            await store.migrate()
        else:
            await store.check_schema()
        return await fn(store)
    finally:
        await store.close()


async def reach(store: Store, settings: Settings) -> None:
    try:
        await store.ping()
    except (StoreError, OSError) as exc:
        where = settings.database.url.split("@")[-1]
        raise StoreError(f"cannot reach the database {where}: {exc}") from None

"""What every command shares: loading the config, logging, the store, output."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from hipq.config import Settings, load_config
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
        return runner.run(command(args, settings))


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
    ``fn`` with it, close it."""
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

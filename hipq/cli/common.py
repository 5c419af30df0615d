"""What every command shares: loading the config, logging, the store, output."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from hipq.config import Settings, load_config
from hipq.errors import StoreError
from hipq.log import setup_logging
from hipq.store import Store, open_store

T = TypeVar("T")
AsyncCommand = Callable[[argparse.Namespace, Settings], Coroutine[Any, Any, int]]


def settings_of(args: argparse.Namespace) -> Settings:
    settings = load_config(args.config)
    setup_logging(settings.logging.level, settings.logging.json_format)
    return settings


def run_command(args: argparse.Namespace, command: AsyncCommand) -> int:
    """Load the config named by ``args`` and run ``command`` in an event loop."""
    settings = settings_of(args)
    return asyncio.run(command(args, settings))


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

"""Fixtures of the HTTP client's tests (test_http_pool and its hostile twin): raw
servers on 127.0.0.1 that write exact bytes, and a pool."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from hipq.targets.http_pool import HttpPool
from tests.unit.test_http_pool import Script, Server


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Script], Awaitable[Server]]]:
    servers: list[Server] = []

    async def start(script: Script) -> Server:
        server = Server(script)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


@pytest.fixture
async def pool() -> AsyncIterator[HttpPool]:
    client = HttpPool(limit=10, cap=1000)
    yield client
    await client.close()

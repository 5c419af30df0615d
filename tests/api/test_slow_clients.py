"""Slow clients (issue 46, finding 6), against a live daemon over real sockets on
127.0.0.1 (other peers are other loopback addresses, 127.0.0.2...):

* a request head must arrive whole within ``api.head_timeout_seconds`` of the
  connection opening or of the previous answer (10 s; 1 s here): a head trickled a
  line at a time, a connection that sends nothing, an idle kept-alive one are closed
  then; a body within ``api.body_timeout_seconds``; an answer the client does not
  take is dropped after ``api.send_timeout_seconds``;
* connections are capped per peer and in all (``api.max_connections_per_peer``,
  ``api.max_connections``): one over a cap is answered 503 and closed at once;
* the daemon answers a normal client while the slow ones hold their connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from hipq.config import ApiConfig
from tests.api.conftest import ADMIN, Live, LiveFactory

# sockets, not storage: one database is enough
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]
HEAD = b"GET /healthz HTTP/1.1\r\nHost: hipq\r\n"


def _port(lv: Live) -> int:
    assert lv.daemon.api_port is not None
    return lv.daemon.api_port


async def _connect(lv: Live, source: str = "127.0.0.1") -> Conn:
    return await asyncio.open_connection("127.0.0.1", _port(lv), local_addr=(source, 0))


async def _closed_after(conn: Conn, within: float = 10.0) -> tuple[float, bytes]:
    """Seconds until the daemon closes the connection, and what it sent before."""
    reader, _ = conn
    start, got = time.monotonic(), b""
    with contextlib.suppress(ConnectionError):
        while chunk := await asyncio.wait_for(reader.read(65536), within):
            got += chunk
    return time.monotonic() - start, got


async def _trickle(conn: Conn, every: float) -> None:
    """A header line every ``every`` seconds, never the blank line that ends the head."""
    _, writer = conn
    writer.write(HEAD)
    n = 0
    with contextlib.suppress(ConnectionError):
        while True:
            await asyncio.sleep(every)
            n += 1
            writer.write(f"X-Line-{n}: more\r\n".encode())
            await writer.drain()


@contextlib.asynccontextmanager
async def _trickling(conns: list[Conn], every: float) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(_trickle(c, every)) for c in conns]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for _, writer in conns:
            writer.close()


async def _settle(lv: Live, count: int, within: float = 5.0) -> None:
    """Wait until the daemon holds ``count`` connections at most."""
    api = lv.daemon.api
    assert api is not None
    deadline = time.monotonic() + within
    while api.open_connections > count:
        assert time.monotonic() < deadline, api.open_connections
        await asyncio.sleep(0.05)  # polling the daemon's count of its connections


async def _healthz(lv: Live, source: str) -> int:
    """A normal client's GET /healthz from ``source`` (its own connection)."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session, session.get(
            f"http://127.0.0.1:{_port(lv)}/healthz",
            timeout=aiohttp.ClientTimeout(total=5)) as answer:
        return answer.status


def test_the_defaults() -> None:
    api = ApiConfig()
    assert api.head_timeout_seconds == 10
    assert api.body_timeout_seconds == 60
    assert api.send_timeout_seconds == 30
    assert api.max_connections == 1024
    assert api.max_connections_per_peer == 128


@SQLITE
async def test_a_head_trickled_line_by_line_is_cut_at_the_deadline(live: LiveFactory) -> None:
    lv = await live(api={"head_timeout_seconds": 1})
    conn = await _connect(lv)
    async with _trickling([conn], every=0.3):  # a line every 0.3 s, each before 1 s
        elapsed, got = await _closed_after(conn)
    assert 0.8 <= elapsed < 2.5, elapsed
    assert got == b""


@SQLITE
async def test_silent_and_idle_connections_are_closed_at_the_deadline(
        live: LiveFactory) -> None:
    lv = await live(api={"head_timeout_seconds": 1})
    silent = await _connect(lv)
    elapsed, _ = await _closed_after(silent)
    assert 0.8 <= elapsed < 2.5, elapsed
    kept = await _connect(lv)
    kept[1].write(HEAD + b"\r\n")
    answer = await asyncio.wait_for(kept[0].readuntil(b"\r\n\r\n"), 5)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert b"keep-alive" in answer.lower() or b"connection: close" not in answer.lower()
    elapsed, _ = await _closed_after(kept)  # the body, then nothing more: closed
    assert elapsed < 2.5, elapsed


@SQLITE
async def test_a_body_trickled_is_cut_at_its_deadline(live: LiveFactory) -> None:
    lv = await live(api={"body_timeout_seconds": 1})
    conn = await _connect(lv)
    writer = conn[1]
    writer.write(b"POST /v1/jobs HTTP/1.1\r\nHost: hipq\r\nContent-Type: application/json\r\n"
                 b"Authorization: Bearer " + ADMIN.encode() + b"\r\n"
                 b"Content-Length: 1000\r\n\r\n{")

    async def drip() -> None:
        with contextlib.suppress(ConnectionError):
            for _ in range(100):
                await asyncio.sleep(0.2)
                writer.write(b" ")
                await writer.drain()

    task = asyncio.create_task(drip())
    try:
        elapsed, got = await _closed_after(conn, within=20)
    finally:
        task.cancel()
    assert got.startswith(b"HTTP/1.1 408"), got[:200]
    assert b'"request_timeout"' in got
    assert elapsed < 5, elapsed


@SQLITE
async def test_an_answer_not_taken_is_dropped(live: LiveFactory) -> None:
    lv = await live(api={"send_timeout_seconds": 1, "head_timeout_seconds": 30})
    _, writer = await _connect(lv)
    writer.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET,
                                                         socket.SO_RCVBUF, 4096)
    request = b"GET /openapi.json HTTP/1.1\r\nHost: hipq\r\n\r\n"
    writer.write(request * 400)  # pipelined: answers of tens of MB, never read
    await _settle(lv, 0, within=15)
    writer.close()


@SQLITE
async def test_connections_over_the_caps_are_refused(live: LiveFactory) -> None:
    lv = await live(api={"head_timeout_seconds": 30, "max_connections_per_peer": 4,
                         "max_connections": 9})
    slow = [await _connect(lv) for _ in range(4)]
    async with _trickling(slow, every=0.5):
        await asyncio.sleep(0.2)  # the daemon accepts them, in order
        refused = await _connect(lv)  # a fifth from the same peer
        elapsed, got = await _closed_after(refused, within=5)
        assert got.startswith(b"HTTP/1.1 503"), got
        assert b'"too_many_connections"' in got
        assert elapsed < 1
        # another peer is served meanwhile, again and again
        for _ in range(3):
            assert await _healthz(lv, "127.0.0.2") == 200
        await _settle(lv, 4)  # the normal client's connections are gone
        others = [await _connect(lv, "127.0.0.3") for _ in range(4)]
        others.append(await _connect(lv, "127.0.0.4"))
        async with _trickling(others, every=0.5):
            await asyncio.sleep(0.2)
            over = await _connect(lv, "127.0.0.5")  # the tenth in all
            _, got = await _closed_after(over, within=5)
            assert got.startswith(b"HTTP/1.1 503"), got
            slow[0][1].close()  # one leaves: room for one more
            await _settle(lv, 8)
            assert await _healthz(lv, "127.0.0.5") == 200

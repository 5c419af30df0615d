"""``hipq enqueue`` against hostile listeners on its port (docs/operations.md, "hipq
enqueue and a running daemon"), in process: raw sockets on 127.0.0.1 that redirect,
drip, nest JSON past any parser's depth or hang up; none gets a token or the job, and
each ends in the database path with a warning, in bounded time."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from hipq.cli import remote
from hipq.cli.remote import Direct, enqueue_via_daemon
from hipq.config import Settings
from hipq.responses.signing import Signer

PRODUCER = "producer-token-46-abcdefghij"
SIGNER = Signer("hostile-listeners-key-0123456789abcdef", instance="0123456789abcdef")
HEALTHZ = b'{"status": "ok", "database": "ok", "instance": "0123456789abcdef"}'
Answer = Callable[[asyncio.StreamWriter], Awaitable[None]]


def _settings(port: int) -> Settings:
    return Settings.model_validate({"api": {"host": "127.0.0.1", "port": port, "tokens": [
        {"token": PRODUCER, "role": "producer"}]}})


@asynccontextmanager
async def listener(answer: Answer) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A raw listener: records each request's head, then lets ``answer`` write."""
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            await answer(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], heads
    finally:
        server.close()
        await server.wait_closed()


async def _enqueue(port: int) -> Direct:
    sent = await enqueue_via_daemon(_settings(port), "q", "j1", {"data": {"secret": 1}},
                                    signer=SIGNER)
    assert isinstance(sent, Direct), sent
    return sent


def _assert_nothing_sent(heads: list[bytes]) -> None:
    assert heads, "the CLI never asked"
    for head in heads:
        assert head.startswith(b"GET /healthz?nonce="), head
        assert b"authorization" not in head.lower(), head
        assert PRODUCER.encode() not in head, head


async def test_a_redirect_is_not_followed() -> None:
    async with listener(_reply(200, HEALTHZ)) as (target, target_heads):
        async def redirect(writer: asyncio.StreamWriter) -> None:
            writer.write(f"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:"
                         f"{target}/healthz\r\nContent-Length: 0\r\n\r\n".encode())
            await writer.drain()

        async with listener(redirect) as (port, heads):
            sent = await _enqueue(port)
    _assert_nothing_sent(heads)
    assert target_heads == []
    assert sent.warning is not None
    assert "/healthz answered 307" in sent.warning


async def test_a_listener_that_drips_its_answer_is_cut_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "ANSWER_SECONDS", 0.5)

    async def drip(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(100):  # a byte every 0.1 s: never a pause the socket times out on
            writer.write(b" ")
            await writer.drain()
            await asyncio.sleep(0.1)

    started = time.monotonic()
    async with listener(drip) as (port, heads):
        sent = await _enqueue(port)
    assert time.monotonic() - started < 3  # cut off at 0.5 s, not after 10 s of drips
    _assert_nothing_sent(heads)
    assert sent.warning is not None


@pytest.mark.parametrize("body", [b"[" * 200_000 + b"]" * 200_000, b"x" * (2 << 20),
                                  HEALTHZ[:-1] + b', "proof": "00"}', b"\xff\xfe"])
async def test_an_answer_that_is_not_a_proof_is_no_crash(body: bytes) -> None:
    async with listener(_reply(200, body)) as (port, heads):
        sent = await _enqueue(port)
    _assert_nothing_sent(heads)
    assert sent.warning is not None
    assert "did not prove" in sent.warning


async def test_a_listener_that_hangs_up_is_no_crash() -> None:
    async def hang_up(writer: asyncio.StreamWriter) -> None:
        transport = writer.transport
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        transport.abort()

    async with listener(hang_up) as (port, heads):
        sent = await _enqueue(port)
    _assert_nothing_sent(heads)
    assert sent.warning is not None


async def test_nobody_listening_is_the_database_without_a_word() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: the connection is refused
        assert await _enqueue(port) == Direct()


def _reply(status: int, body: bytes) -> Answer:
    async def answer(writer: asyncio.StreamWriter) -> None:
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()

    return answer

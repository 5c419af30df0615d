"""The HTTP target's client (hipq.targets.http_pool) against hostile servers on
127.0.0.1: a head that never ends, bytes no request asked for, a switch of protocols,
and an origin that never answers. Each case is a finding of a security review; the
servers write exactly the bytes each case needs (helpers from test_http_pool)."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from hipq.config import HttpTarget as HttpTargetConfig
from hipq.errors import TransientLaunchError
from hipq.jobs import ErrorKind, Job
from hipq.targets import http_pool
from hipq.targets.http import HttpClient, HttpTarget
from hipq.targets.http_pool import HttpPool, HttpTransportError
from hipq.testing import FakeClock
from tests.unit.test_http_pool import HEADERS, Script, Server, keep_answering, url

Serve = Callable[[Script], Awaitable[Server]]
FRESH = b"HTTP/1.1 200 OK\r\nX-Which: fresh\r\nContent-Length: 5\r\n\r\nfresh"




@pytest.fixture
async def loop_errors() -> AsyncIterator[list[dict[str, Any]]]:
    """What reaches the loop's exception handler (an error no caller handled)."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: errors.append(context))
    yield errors
    loop.set_exception_handler(previous)


# -- 1. a head that never ends ---------------------------------------------------------


@pytest.mark.parametrize(("start", "unit"), [
    (b"HTTP/1.1 200 OK\r\nX-A: ", b"a" * 256),  # one header value, never ended
    (b"HTTP/1.1 200 OK\r\n", b"X" * 256),  # one header name, never ended
    (b"HTTP/1.1 200 ", b"O" * 256),  # the status line's reason, never ended
    (b"", b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" * 8),  # interim answers
], ids=["value", "name", "reason", "interim"])
async def test_a_head_that_never_ends_fails_fast(serve: Serve, pool: HttpPool, start: bytes,
                                                 unit: bytes) -> None:
    sent = 0

    async def script(server: Server, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await server.read_request(reader)
        writer.write(start)
        while sent < 8 * 1024 * 1024 and not writer.is_closing():  # many small writes
            writer.write(unit)
            sent += len(unit)
            await writer.drain()
            await asyncio.sleep(0)
        await reader.read()

    server = await serve(script)
    tracemalloc.start()
    try:
        with pytest.raises(HttpTransportError, match="too large"):
            await pool.post(url(server), HEADERS, b"{}", within=5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sent < 1024 * 1024, "refused soon after the head passed 64 KiB"
    assert peak < 4 * 1024 * 1024


async def test_a_trailer_that_never_ends_cuts_the_answer(serve: Serve, pool: HttpPool) -> None:
    """A chunked answer whose trailer (a header after the body) never ends: the answer
    is cut once MAX_FRAMING_BYTES of it besides its body were read."""
    sent = 0

    async def script(server: Server, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5\r\nhello\r\n0\r\nX-Trailer: ")
        while sent < 8 * 1024 * 1024 and not writer.is_closing():
            writer.write(b"t" * 256)
            sent += 256
            await writer.drain()
            await asyncio.sleep(0)
        await reader.read()

    server = await serve(script)
    answer = await pool.post(url(server), HEADERS, b"{}", within=5)
    assert (answer.status, answer.body, answer.truncated) == (200, b"hello", True)
    assert sent < 1024 * 1024
    await pool.post(url(server), HEADERS, b"{}", within=5)
    assert server.connections == 2


async def test_a_large_head_and_body_in_one_read_are_fine(serve: Serve) -> None:
    """The head limit counts the head, not the body that came in the same read."""
    body = b"z" * 200_000
    head = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"p" * 60_000 + b"\r\n"
    server = await serve(keep_answering(head + b"Content-Length: %d\r\n\r\n%s"
                                        % (len(body), body)))
    client = HttpPool(limit=2, cap=len(body))
    try:
        for _ in range(2):
            answer = await client.post(url(server), HEADERS, b"{}", within=5)
            assert (answer.status, answer.body, answer.truncated) == (200, body, False)
    finally:
        await client.close()
    assert server.connections == 1


# -- 2. bytes no request asked for -------------------------------------------------------

FIRST = b"HTTP/1.1 200 OK\r\nX-Which: first\r\nContent-Length: 5\r\n\r\nfirst"
SECOND_HEAD = b"HTTP/1.1 201 Created\r\nX-Which: second\r\nX-Only-Second: 1\r\n"
SECOND_REST = b"Content-Length: 6\r\n\r\nsecond"


@pytest.mark.parametrize("split", [False, True], ids=["whole", "head-then-rest"])
async def test_bytes_after_an_answer_close_the_connection(serve: Serve, pool: HttpPool,
                                                          split: bool) -> None:
    """Two answers to one request (or the start of a second one, ended when the next
    request comes): the first is the answer, with its own headers; the rest is never
    taken for the answer to the next request."""

    async def script(server: Server, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        first = server.connections == 1
        await server.read_request(reader)
        if first:
            writer.write(FIRST + SECOND_HEAD + (b"" if split else SECOND_REST))
            await writer.drain()
            await server.read_request(reader)  # only if the connection is reused
            writer.write(SECOND_REST if split else FRESH.replace(b"fresh", b"stale"))
            await writer.drain()
        else:
            writer.write(FRESH)
            await writer.drain()
        await reader.read()

    server = await serve(script)
    answer = await pool.post(url(server), HEADERS, b"{}", within=5)
    assert (answer.status, answer.body) == (200, b"first")
    await asyncio.sleep(0.05)  # whatever else the server wrote has been read
    after = await pool.post(url(server), HEADERS, b"{}", within=5)
    assert (after.status, after.body) == (200, b"fresh")
    assert after.headers["x-which"] == "fresh"
    assert server.connections == 2
    assert dict(answer.headers) == {"x-which": "first", "content-length": "5"}


async def test_an_answers_headers_are_never_written_after_it_is_returned(
        serve: Serve, pool: HttpPool) -> None:
    """A chunked answer cut at the cap (1000 bytes) whose trailer comes in the same
    read: the answer returned is not changed by what is parsed after it."""
    body = b"y" * 1500
    server = await serve(keep_answering(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Which: first\r\n\r\n"
        + b"%x\r\n%s\r\n0\r\nX-Which: trailer\r\nX-Late: yes\r\n\r\n" % (len(body), body)))
    answer = await pool.post(url(server), HEADERS, b"{}", within=5)
    seen = dict(answer.headers)
    assert (answer.truncated, seen["x-which"]) == (True, "first")
    await pool.post(url(server), HEADERS, b"{}", within=5)
    assert dict(answer.headers) == seen
    assert "x-late" not in answer.headers


# -- 3. 101 Switching Protocols ----------------------------------------------------------

SWITCHES = [b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\n\r\n\x81\x05hello",
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n"]


@pytest.mark.parametrize("switch", SWITCHES, ids=["upgrade", "bare"])
async def test_switching_protocols_is_a_transport_error(
        serve: Serve, pool: HttpPool, loop_errors: list[dict[str, Any]],
        switch: bytes) -> None:
    async def script(server: Server, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        writer.write(switch if server.connections == 1 else FRESH)
        await writer.drain()
        await reader.read()

    server = await serve(script)
    with pytest.raises(HttpTransportError, match="101"):
        await pool.post(url(server), HEADERS, b"{}", within=5)
    after = await pool.post(url(server), HEADERS, b"{}", within=5)
    assert (after.body, server.connections) == (b"fresh", 2)
    assert loop_errors == []


def _job() -> Job:
    now = FakeClock().now()
    return Job(id="j", queue="q", run_at=now, created_at=now, updated_at=now,
               correlation_key="k", attempt=1, max_attempts=3)


async def _http_target(server: Server, **config: Any) -> tuple[HttpTarget, HttpClient]:
    client = HttpClient()
    await client.start()
    settings = HttpTargetConfig(kind="http", url=f"http://127.0.0.1:{server.port}/jobs",
                                mode="sync", **config)
    return HttpTarget(settings, client), client


async def test_a_launch_answered_by_a_switch_of_protocols_is_a_transport_failure(
        serve: Serve, loop_errors: list[dict[str, Any]]) -> None:
    server = await serve(keep_answering(SWITCHES[0]))
    target, client = await _http_target(server)
    try:
        with pytest.raises(TransientLaunchError, match="101") as caught:
            await target.launch(_job())
    finally:
        await client.close()
    assert caught.value.kind == ErrorKind.TRANSPORT
    assert loop_errors == []


# -- 4. connection slots per origin, waiting bounded ----------------------------------------


async def test_origins_nobody_uses_are_forgotten(serve: Serve,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Slots are per origin, and origins can be many (a URL template can name the
    host): the pool keeps none it has no connection or request for."""
    servers = [await serve(keep_answering(FRESH)) for _ in range(3)]
    client = HttpPool(limit=2, cap=100)
    try:
        for server in servers:
            await client.post(url(server), HEADERS, b"{}", within=5)
        assert len(client._origins) == 3
        monkeypatch.setattr(http_pool, "KEEPALIVE_SECONDS", 0.0)  # the next release sweeps
        await client.post(url(servers[0]), HEADERS, b"{}", within=5)
        assert list(client._origins) == [url(servers[0]).origin]
    finally:
        await client.close()


def never_answering(hold: asyncio.Event, arrived: asyncio.Semaphore | None = None) -> Script:
    async def script(server: Server, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        if arrived is not None:
            arrived.release()
        await hold.wait()

    return script


async def test_a_slow_origin_never_delays_another(serve: Serve) -> None:
    hold, arrived = asyncio.Event(), asyncio.Semaphore(0)
    slow = await serve(never_answering(hold, arrived))
    fast = await serve(keep_answering(FRESH))
    client = HttpPool(limit=2, cap=100)
    stuck = [asyncio.create_task(client.post(url(slow), HEADERS, b"{}", within=30))
             for _ in range(2)]
    try:
        for _ in range(2):  # both requests are out: both slots of `slow` are taken
            await asyncio.wait_for(arrived.acquire(), 5)
        answer = await asyncio.wait_for(client.post(url(fast), HEADERS, b"{}", within=5), 2)
        assert answer.body == b"fresh"
        started = time.monotonic()
        with pytest.raises(TimeoutError):  # the wait for a slot counts within `within`
            await asyncio.wait_for(client.post(url(slow), HEADERS, b"{}", within=0.3), 3)
        assert 0.25 < time.monotonic() - started < 1.0
        assert not any(task.done() for task in stuck)
        assert (len(slow.heads), slow.connections) == (2, 2)
    finally:
        hold.set()
        for task in stuck:
            task.cancel()
        await asyncio.gather(*stuck, return_exceptions=True)
        await client.close()


async def test_a_launch_waits_for_a_slot_within_its_timeout(serve: Serve) -> None:
    """``max_in_flight`` 1 and a downstream that never answers: the second launch
    waits for the first one's slot, and gives up within its own timeout, not after
    the first launch's timeout and then its own."""
    hold = asyncio.Event()
    server = await serve(never_answering(hold))
    target, client = await _http_target(server, timeout_seconds=0.5, max_in_flight=1)

    async def launch() -> tuple[float, BaseException | None]:
        started = time.monotonic()
        try:
            await target.launch(_job())
        except TransientLaunchError as exc:
            return time.monotonic() - started, exc
        return time.monotonic() - started, None

    try:
        outcomes = await asyncio.wait_for(asyncio.gather(launch(), launch()), 5)
    finally:
        hold.set()
        await client.close()
    for took, error in outcomes:
        assert isinstance(error, TransientLaunchError)
        assert error.kind == ErrorKind.TIMEOUT
        assert took < 0.8, "one timeout in total: the wait for a slot, then the request"

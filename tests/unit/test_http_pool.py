"""The HTTP target's client (hipq.targets.http_pool) against servers on 127.0.0.1 that
write exactly the bytes each case needs: how answers are framed (length, chunks, the
close), what is cut, what is refused, when a connection is reused, and TLS."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable

import pytest
import trustme

from hipq.targets import http_pool
from hipq.targets.http_pool import Endpoint, HttpPool, HttpTransportError, header_block

Script = Callable[["Server", asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """A raw TCP server; each connection runs ``script``. Counts connections and
    keeps the request heads it read."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.heads: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.script(self, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        return await reader.readexactly(length)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def url(server: Server, path: str = "/jobs") -> Endpoint:
    return Endpoint.parse(f"http://127.0.0.1:{server.port}{path}")


HEADERS = header_block([("Content-Type", "application/json")])


def keep_answering(answer: bytes, *, then_close: bool = False) -> Script:
    async def script(server: Server, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        while True:
            await server.read_request(reader)
            writer.write(answer)
            await writer.drain()
            if then_close:
                return

    return script


async def start_answering(serve: Callable[[Script], Awaitable[Server]],
                          answer: bytes) -> Server:
    return await serve(keep_answering(answer))


async def test_length_delimited_answers_reuse_one_connection(
        serve: Callable[[Script], Awaitable[Server]], pool: HttpPool) -> None:
    server = await start_answering(
        serve, b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
               b"Content-Length: 11\r\n\r\n{\"ok\":true}")
    for _ in range(3):
        answer = await pool.post(url(server), HEADERS, b'{"a":1}', within=5)
        assert (answer.status, answer.body, answer.truncated) == (200, b'{"ok":true}', False)
        assert (answer.content_type, answer.charset) == ("application/json", "utf-8")
    assert server.connections == 1
    head = server.heads[0].decode()
    assert head.startswith("POST /jobs HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{server.port}\r\n" in head
    assert "Content-Length: 7\r\n" in head
    assert "Content-Type: application/json\r\n" in head


@pytest.mark.parametrize(("answer", "then_close", "expected", "connections"), [
    (b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n", False, (202, b"abcdefg"), 1),
    # delimited by the close: complete, and the connection is not reused
    (b"HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\nall of it", True, (500, b"all of it"), 2),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nold", False, (200, b"old"), 2),
], ids=["chunked", "until-close", "http-1.0"])
async def test_answer_framing(serve: Callable[[Script], Awaitable[Server]], pool: HttpPool,
                              answer: bytes, then_close: bool, expected: tuple[int, bytes],
                              connections: int) -> None:
    server = await serve(keep_answering(answer, then_close=then_close))
    for _ in range(2):
        got = await pool.post(url(server), HEADERS, b"{}", within=5)
        assert (got.status, got.body) == expected
    assert server.connections == connections


async def test_a_connection_closed_mid_answer_is_a_transport_error(
        serve: Callable[[Script], Awaitable[Server]], pool: HttpPool) -> None:
    server = await serve(keep_answering(
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part", then_close=True))
    with pytest.raises(HttpTransportError, match="before the answer ended"):
        await pool.post(url(server), HEADERS, b"{}", within=5)


async def test_no_answer_at_all_is_a_transport_error(
        serve: Callable[[Script], Awaitable[Server]], pool: HttpPool) -> None:
    async def script(server: Server, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)

    server = await serve(script)
    with pytest.raises(HttpTransportError):
        await pool.post(url(server), HEADERS, b"{}", within=5)


async def test_a_malformed_answer_is_a_transport_error(
        serve: Callable[[Script], Awaitable[Server]], pool: HttpPool) -> None:
    server = await start_answering(serve, b"HTTP/1.1 abc nonsense\r\n\r\n")
    with pytest.raises(HttpTransportError, match="malformed"):
        await pool.post(url(server), HEADERS, b"{}", within=5)


async def test_headers_over_the_limit_are_refused(
        serve: Callable[[Script], Awaitable[Server]], pool: HttpPool) -> None:
    many = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"v" * 1000) for i in range(80))
    server = await start_answering(serve, b"HTTP/1.1 200 OK\r\n" + many
                                   + b"Content-Length: 0\r\n\r\n")
    with pytest.raises(HttpTransportError, match="too large"):
        await pool.post(url(server), HEADERS, b"{}", within=5)


async def test_an_answer_over_the_cap_is_cut_and_its_connection_closed(
        serve: Callable[[Script], Awaitable[Server]], pool: HttpPool) -> None:
    big = b"y" * 5000
    server = await start_answering(
        serve, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big))
    for _ in range(2):
        answer = await pool.post(url(server), HEADERS, b"{}", within=5)
        assert (answer.status, len(answer.body), answer.truncated) == (200, 1000, True)
    assert server.connections == 2


async def test_an_interim_answer_is_skipped(serve: Callable[[Script], Awaitable[Server]],
                                            pool: HttpPool) -> None:
    server = await start_answering(
        serve, b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
               b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
    answer = await pool.post(url(server), HEADERS, b"{}", within=5)
    assert (answer.status, answer.body, "link" in answer.headers) == (201, b"ok", False)


async def test_a_slow_answer_times_out_and_its_connection_is_dropped(
        serve: Callable[[Script], Awaitable[Server]], pool: HttpPool) -> None:
    async def script(server: Server, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        await server.read_request(reader)
        if server.connections == 1:
            await asyncio.sleep(10)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        await reader.read()

    server = await serve(script)
    with pytest.raises(TimeoutError):
        await pool.post(url(server), HEADERS, b"{}", within=0.2)
    answer = await pool.post(url(server), HEADERS, b"{}", within=5)
    assert (answer.status, server.connections) == (200, 2)


async def test_a_connection_the_server_closed_while_idle_is_not_reused(
        serve: Callable[[Script], Awaitable[Server]], pool: HttpPool) -> None:
    # then the server closes, as at its idle timeout
    server = await serve(keep_answering(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
                                        then_close=True))
    await pool.post(url(server), HEADERS, b"{}", within=5)
    await asyncio.sleep(0.1)
    answer = await pool.post(url(server), HEADERS, b"{}", within=5)
    assert (answer.status, server.connections) == (200, 2)


async def test_idle_connections_expire(serve: Callable[[Script], Awaitable[Server]],
                                       pool: HttpPool, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:
    server = await start_answering(serve, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    await pool.post(url(server), HEADERS, b"{}", within=5)
    monkeypatch.setattr(http_pool, "KEEPALIVE_SECONDS", 0.0)
    await pool.post(url(server), HEADERS, b"{}", within=5)
    assert server.connections == 2


async def test_a_refused_connection_is_a_transport_error(pool: HttpPool) -> None:
    server = Server(keep_answering(b""))
    await server.start()
    port = server.port
    await server.close()
    with pytest.raises(HttpTransportError, match="cannot connect"):
        await pool.post(Endpoint.parse(f"http://127.0.0.1:{port}/"), HEADERS, b"{}", within=5)


async def test_requests_in_flight_are_bounded(serve: Callable[[Script], Awaitable[Server]]
                                              ) -> None:
    in_flight = peak = 0

    async def script(server: Server, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        nonlocal in_flight, peak
        while True:
            await server.read_request(reader)
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.05)
            in_flight -= 1
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()

    server = await serve(script)
    client = HttpPool(limit=3, cap=100)
    try:
        await asyncio.gather(*(client.post(url(server), HEADERS, b"{}", within=5)
                               for _ in range(9)))
    finally:
        await client.close()
    assert (peak, server.connections) == (3, 3)


def test_urls_and_hosts() -> None:
    target = Endpoint.parse("https://Example.COM/a b/ü?q=1")
    assert target.origin == ("https", "example.com", 443)
    assert (target.host_header, target.path) == ("example.com", "/a%20b/%C3%BC?q=1")
    v6 = Endpoint.parse("http://[::1]:8081")
    assert (v6.origin, v6.host_header, v6.path) == (("http", "::1", 8081), "[::1]:8081", "/")
    with pytest.raises(ValueError, match="absolute"):
        Endpoint.parse("/relative")


@pytest.mark.parametrize(("name", "value"), [
    ("X-Ok", "a\r\nInjected: yes"), ("X-Ok", "a\nb"), ("X-Ok", "nul\x00"),
    ("Bad Name", "v"), ("", "v"), ("X:Colon", "v")])
def test_header_block_refuses_what_would_break_the_request(name: str, value: str) -> None:
    with pytest.raises(ValueError, match="header"):
        header_block([(name, value)])


async def test_https_with_a_trusted_certificate(serve: Callable[[Script], Awaitable[Server]]
                                                ) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_context)
    server = Server(keep_answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
    await server.start(server_context)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    target = Endpoint.parse(f"https://localhost:{server.port}/x")
    try:
        client = HttpPool(limit=2, cap=100, ssl_context=trusting)
        answer = await client.post(target, HEADERS, b"{}", within=5)
        assert (answer.status, answer.body) == (200, b"ok")
        await client.close()
        stranger = HttpPool(limit=2, cap=100)  # the system's trust store: not this CA
        with pytest.raises(HttpTransportError, match="cannot connect"):
            await stranger.post(target, HEADERS, b"{}", within=5)
        await stranger.close()
    finally:
        await server.close()


def test_the_same_on_uvloop() -> None:
    """The daemon runs on uvloop (its transports are not asyncio's classes)."""
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> list[tuple[int, bytes]]:
        answers = [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                   b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"2\r\nab\r\n0\r\n\r\n",
                   b"HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\nbye"]
        seen = []
        client = HttpPool(limit=2, cap=100)
        for answer in answers:
            server = Server(keep_answering(answer, then_close=b"close" in answer))
            await server.start()
            try:
                got = await client.post(url(server), HEADERS, b"{}", within=5)
                seen.append((got.status, got.body))
            finally:
                await server.close()
        await client.close()
        return seen

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(scenario()) == [(200, b"ok"), (202, b"ab"), (500, b"bye")]


async def test_answers_on_reused_connections_time_out_by_their_own_deadlines(
        serve: Callable[[Script], Awaitable[Server]], pool: HttpPool) -> None:
    """A reused connection's answer is timed by the pool's one deadline timer (issue
    28): a short timeout after a long one still fires at its own time, an answer in
    time is kept, and the connection that timed out is dropped, not reused."""
    async def script(server: Server, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        while True:
            body = await server.read_request(reader)
            if body == b'"never"':
                await asyncio.sleep(10)
            elif body == b'"late"':
                await asyncio.sleep(0.5)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()

    server = await serve(script)
    await asyncio.gather(*(pool.post(url(server), HEADERS, b"{}", within=5) for _ in range(2)))
    assert server.connections == 2  # both idle now, reused below
    loop = asyncio.get_running_loop()
    started = loop.time()
    late = asyncio.ensure_future(pool.post(url(server), HEADERS, b'"late"', within=3))
    await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        await pool.post(url(server), HEADERS, b'"never"', within=0.2)
    assert 0.15 < loop.time() - started < 0.45
    assert (await late).status == 200
    answer = await pool.post(url(server), HEADERS, b"{}", within=5)
    assert (answer.status, server.connections) == (200, 2)  # the late one's, reused

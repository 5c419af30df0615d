"""The HTTP target's client: one ``POST`` of a JSON body per launch, its answer read up
to a cap, over keep-alive HTTP/1.1 connections.

Why not aiohttp's client: a launch is most of what a callback round trip costs hipq,
and aiohttp's request machinery (URL objects, multidicts, payload objects, tasks,
cookie filtering, tracing hooks) costs about three times the CPU per request of this
client (``bench/http_client.py``: 103 against 35 µs on a 2-core Xeon). The wire
format stays with a well-kept parser: answers are parsed by llhttp (``httptools``,
the parser of uvicorn), which handles chunked and length-delimited bodies and
refuses malformed ones.

What it does: connections per origin (scheme, host, port), reused LIFO while the
server keeps them alive, closed after :data:`KEEPALIVE_SECONDS` idle; at most
``limit`` requests in flight per origin, so one slow origin never delays requests to
another; TLS with the system's trust store (``https``). The whole request (the wait
for one of its origin's slots, connect, send, answer) runs within the caller's
timeout. What it does not: redirects (a 3xx is an answer like any other), proxies,
cookies, compression (``Accept-Encoding: identity``), protocol upgrades, retries (a
POST is not repeated: a dropped connection is the caller's transport failure).

Failure modes: a connection error, a malformed answer, a ``101 Switching Protocols``,
heads (status line and headers, interim answers included) past
:data:`MAX_HEAD_BYTES` (counted as they arrive: a header that never ends is refused
at the limit), or a connection closed before a length-delimited answer ended raise
:class:`HttpTransportError`; the connection is closed and never reused. Bytes after
the answer that no request asked for (a second answer, or the start of one) close
the connection: they are never taken for the answer to the next request. No slot,
connection or answer in time raises TimeoutError; a timeout or a cancellation closes
the connection (its state is unknown). An answer over the cap is cut at the cap and
its connection closed, and so is one whose bytes other than its body (chunk sizes,
trailers) go past :data:`MAX_FRAMING_BYTES`. An answer's headers are its own:
nothing parsed later changes them.
"""

from __future__ import annotations

import asyncio
import heapq
import re
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import cast

import httptools
import yarl

KEEPALIVE_SECONDS = 30.0  # an idle connection is closed after this long
MAX_IDLE_PER_ORIGIN = 256  # idle connections kept per origin (the rest are closed)
MAX_HEAD_BYTES = 64 * 1024  # status lines and headers of a request's answer
MAX_FRAMING_BYTES = 2 * MAX_HEAD_BYTES  # an answer's bytes but its body (past it: cut)


class HttpTransportError(Exception):
    """The request got no complete answer: connection refused, reset or closed early,
    a malformed answer, a TLS failure."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: Mapping[str, str]  # names lower-cased; a repeated header: its last value
    body: bytes  # at most the cap
    truncated: bool = False  # the body went on past the cap

    @property
    def content_type(self) -> str:
        """The media type, lower-cased, without parameters (``""`` if none)."""
        return self.headers.get("content-type", "").partition(";")[0].strip().lower()

    @property
    def charset(self) -> str | None:
        for param in self.headers.get("content-type", "").split(";")[1:]:
            name, _, value = param.partition("=")
            if name.strip().lower() == "charset" and value.strip():
                return value.strip().strip('"')
        return None


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed URL: where to connect and what to ask for."""

    origin: tuple[str, str, int]  # scheme, host (IDNA), port
    host_header: str
    path: str  # path and query, percent-encoded

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        return cls.of(yarl.URL(url))

    @classmethod
    def of(cls, parsed: yarl.URL) -> Endpoint:
        """From a URL already parsed (ValueError unless absolute http(s))."""
        if parsed.scheme not in ("http", "https") or not parsed.raw_host:
            raise ValueError(f"not an absolute http(s) URL: {str(parsed)[:200]!r}")
        host = parsed.raw_host
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        bracketed = f"[{host}]" if ":" in host else host
        host_header = bracketed if parsed.is_default_port() else f"{bracketed}:{port}"
        return cls((parsed.scheme, host, port), host_header, parsed.raw_path_qs or "/")


# an HTTP token (RFC 9110: tchar), and what a header value must not hold; checked by
# the regex engine, not a Python loop per character (every launch has a header block)
_TOKEN = re.compile(r"[A-Za-z0-9!#$%&'*+\-.^_`|~]+").fullmatch
_BREAKS = re.compile("[\r\n\x00]").search


def header_block(headers: Iterable[tuple[str, str]]) -> bytes:
    """``Name: value\\r\\n`` lines; ValueError for a name or value that would break
    the request (a line break, NUL, or a name that is not a token)."""
    lines = []
    for name, value in headers:
        if not _TOKEN(name):
            raise ValueError(f"invalid HTTP header name {name[:100]!r}")
        if _BREAKS(value):
            raise ValueError(f"the value of the HTTP header {name[:100]!r} has a line break "
                             "or a NUL character")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode("utf-8")


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: one request at a time, its answer parsed by llhttp."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self.reusable = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Answer] | None = None
        self._headers: dict[str, str] = {}
        self._read = 0  # bytes of the current request's answer, counted as they arrive
        self._reset()

    def _reset(self) -> None:
        """Ready for the next message (the head bytes of an interim answer count on)."""
        self._status = 0
        self._headers.clear()  # never an answer's: _answer hands its dict over
        self._body: list[bytes] = []
        self._size = 0
        self._head_done = False
        self._refusal: HttpTransportError | None = None

    # -- the transport's side --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self._close()  # nobody asked: a server that talks out of turn is not reused
        elif not self._head_done:
            self._feed_head(data)
        else:
            self._read += len(data)
            self._feed(data)
            if self._read - self._size > MAX_FRAMING_BYTES:  # a trailer that never ends
                self._finish(truncated=True)

    def _feed_head(self, data: bytes) -> None:
        """Count the head's bytes as they arrive (llhttp reports a header only once its
        value ended, and gathers the value until then): refused past MAX_HEAD_BYTES."""
        room = MAX_HEAD_BYTES - self._read  # >= 0 while the head is not done
        self._read += len(data)
        if len(data) > room:  # past the limit, unless the head ends within it
            self._feed(data[:room])
            if not self._head_done:
                self._fail(HttpTransportError("the answer's headers are too large"))
                return
            data = data[room:]
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(self._refusal or HttpTransportError(f"malformed answer: {exc}"[:300]))

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost decides what the answer was

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        framed = "content-length" in self._headers or "transfer-encoding" in self._headers
        if self._head_done and not framed:  # an answer delimited by the close: complete
            waiter.set_result(self._answer(truncated=False))
            return
        detail = f": {exc}" if exc else ""
        waiter.set_exception(HttpTransportError(
            f"the server closed the connection before the answer ended{detail}"[:300]))

    # -- llhttp's callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._waiter is not None and self._waiter.done():  # the request has its answer
            raise self._refuse("the server sent more than the answer")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._head_done = True

    def on_body(self, body: bytes) -> None:
        if self._status < 200:
            return
        room = self.cap - self._size
        if len(body) > room:
            self._body.append(body[:room])
            self._size = self.cap
            self._finish(truncated=True)
            return
        self._body.append(body)
        self._size += len(body)

    def on_message_complete(self) -> None:
        if 100 <= self._status < 200:  # an interim answer (103 Early Hints): wait on
            if self._status == 101:
                raise self._refuse("the server switched protocols (HTTP 101)")
            self._reset()
            return
        self._finish(truncated=False)

    def _refuse(self, reason: str) -> HttpTransportError:
        """The error for the request, raised in a callback to stop llhttp."""
        self._refusal = HttpTransportError(reason)
        return self._refusal

    # -- the client's side -----------------------------------------------------------

    async def request(self, head: bytes, body: bytes) -> Answer:
        return await self.send(head, body)

    def send(self, head: bytes, body: bytes) -> asyncio.Future[Answer]:
        """Write the request; the future of its answer."""
        assert self.transport is not None
        self.reusable = False
        self._read = 0
        self._reset()
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        try:
            self.transport.write(head + body)
        except (OSError, RuntimeError) as exc:  # closed under us (uvloop raises)
            raise HttpTransportError(f"the connection closed before the request was "
                                     f"sent: {exc}"[:300]) from None
        return waiter

    def _answer(self, *, truncated: bool) -> Answer:
        headers, self._headers = self._headers, {}  # the answer's own from now on
        return Answer(self._status, headers, b"".join(self._body), truncated)

    def _finish(self, *, truncated: bool) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        self.reusable = not truncated and self._parser.should_keep_alive()
        waiter.set_result(self._answer(truncated=truncated))
        if truncated:
            self._close()

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self._close()

    def _close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.abort()


class _Origin:
    """One origin's connection slots and idle connections."""

    __slots__ = ("address", "idle", "slots", "users")

    def __init__(self, address: tuple[str, str, int], limit: int) -> None:
        self.address = address
        self.slots = asyncio.Semaphore(limit)
        self.idle: list[_Connection] = []  # reused last in, first out
        self.users = 0  # requests holding or waiting for a slot


class HttpPool:
    """Keep-alive connections per origin; ``post`` is one request and its answer."""

    def __init__(self, *, limit: int, cap: int,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._limit = limit  # requests in flight per origin
        self._cap = cap
        self._ssl = ssl_context
        self._origins: dict[tuple[str, str, int], _Origin] = {}
        self._swept = time.monotonic()
        self._closed = False
        # answers awaited on reused connections, by deadline: one timer for them all
        # (a timer per request costs more than the rest of the wait, issue 28)
        self._deadlines: list[tuple[float, int, asyncio.Future[Answer], _Connection]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._sent = 0  # numbers the deadlines (equal times keep their order)

    async def post(self, target: Endpoint, headers: bytes, body: bytes, *,
                   within: float) -> Answer:
        """POST ``body`` to ``target`` with the ``headers`` block (:func:`header_block`:
        every header but Host and Content-Length) within ``within`` seconds, the wait
        for a slot included (TimeoutError)."""
        head = (f"POST {target.path} HTTP/1.1\r\nHost: {target.host_header}\r\n"
                f"Content-Length: {len(body)}\r\n").encode("ascii") + headers + b"\r\n"
        origin = self._origins.get(target.origin) or self._add(target.origin)
        origin.users += 1
        conn: _Connection | None = None
        try:
            if not origin.slots.locked() and not self._closed and origin.idle:
                # the usual case: a free slot and a connection to reuse, so nothing to
                # wait for but the answer, within the pool's deadline timer
                conn = self._reuse(origin)
                if conn is not None:
                    async with origin.slots:
                        answer = await self._answer(conn, head, body, within)
                        self._release(origin, conn)
                    return answer
            async with asyncio.timeout(within), origin.slots:
                if self._closed:
                    raise HttpTransportError("the HTTP client is closed")
                conn = self._reuse(origin) or await self._connect(origin.address)
                answer = await conn.request(head, body)
                self._release(origin, conn)
        except BaseException:
            if conn is not None:
                conn.abort()
            raise
        finally:
            origin.users -= 1
        return answer

    async def _answer(self, conn: _Connection, head: bytes, body: bytes,
                      within: float) -> Answer:
        """Send on ``conn``; its answer, or TimeoutError after ``within`` seconds (the
        connection is then aborted: its state is unknown)."""
        waiter = conn.send(head, body)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        self._sent += 1
        heap = self._deadlines
        if len(heap) > 2 * self._limit * len(self._origins) + 64:  # answered long ago
            heap[:] = [d for d in heap if not d[2].done()]
            heapq.heapify(heap)
        heapq.heappush(heap, (deadline, self._sent, waiter, conn))
        if self._timer is None or deadline < self._timer_at:
            self._arm(loop, deadline)
        return await waiter

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = loop.call_at(at, self._expire), at

    def _expire(self) -> None:
        """The deadline timer: answers not in by their deadline fail with TimeoutError;
        armed again for the first one still awaited."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now, heap = loop.time(), self._deadlines
        while heap:
            deadline, _, waiter, conn = heap[0]
            if not waiter.done() and deadline > now:
                self._arm(loop, deadline)
                return
            heapq.heappop(heap)
            if not waiter.done():
                waiter.set_exception(TimeoutError())
                conn.abort()

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for origin in self._origins.values():
            for conn in origin.idle:
                conn.abort()
            origin.idle.clear()
        self._origins.clear()

    def _add(self, address: tuple[str, str, int]) -> _Origin:
        origin = self._origins[address] = _Origin(address, self._limit)
        return origin

    def _reuse(self, origin: _Origin) -> _Connection | None:
        conns = origin.idle
        now = time.monotonic()
        while conns:
            conn = conns.pop()
            transport = conn.transport
            if (conn.reusable and transport is not None and not transport.is_closing()
                    and now - conn.idle_since < KEEPALIVE_SECONDS):
                return conn
            conn.abort()
        return None

    async def _connect(self, address: tuple[str, str, int]) -> _Connection:
        scheme, host, port = address
        context: ssl.SSLContext | None = None
        if scheme == "https":
            context = self._ssl or _default_context()
        cap = self._cap
        try:
            _, conn = await asyncio.get_running_loop().create_connection(
                lambda: _Connection(cap), host, port, ssl=context,
                server_hostname=host if context is not None else None)
        except (OSError, ssl.SSLError) as exc:
            raise HttpTransportError(f"cannot connect to {host}:{port}: {exc}"[:300]) from None
        return conn

    def _release(self, origin: _Origin, conn: _Connection) -> None:
        transport = conn.transport
        if not conn.reusable or transport is None or transport.is_closing() or self._closed:
            conn.abort()
            return
        now = time.monotonic()
        if now - self._swept > KEEPALIVE_SECONDS:
            self._sweep(now)
        if len(origin.idle) >= MAX_IDLE_PER_ORIGIN:
            conn.abort()
            return
        conn.idle_since = now
        origin.idle.append(conn)

    def _sweep(self, now: float) -> None:
        """Close the connections idle for too long, in every origin; forget the origins
        nobody uses."""
        self._swept = now
        for address, origin in list(self._origins.items()):
            for conn in origin.idle:
                if now - conn.idle_since >= KEEPALIVE_SECONDS:
                    conn.abort()
            origin.idle[:] = [c for c in origin.idle if now - c.idle_since < KEEPALIVE_SECONDS]
            if not origin.idle and not origin.users:
                del self._origins[address]


_CONTEXT: ssl.SSLContext | None = None


def _default_context() -> ssl.SSLContext:
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = ssl.create_default_context()
    return _CONTEXT

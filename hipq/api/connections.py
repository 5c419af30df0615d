"""The API's connections and slow clients (docs/operations.md, "Connections").

A client that holds a connection without finishing its request, or without taking
its answer, costs the daemon an open file and memory. Every connection of the API
is a :class:`GuardedConnection` (an aiohttp request handler), which bounds both:

* **caps**: a :class:`ConnectionGate` counts the connections held, in all and per
  peer (an IPv4 address, an IPv6 /64); one over ``api.max_connections`` or
  ``api.max_connections_per_peer`` is answered ``503 too_many_connections`` and
  closed before anything of it is read;
* **the request head**: it must arrive whole within ``api.head_timeout_seconds``
  (10 s) of the connection opening or of the previous answer, whatever it sends
  meanwhile: aiohttp's keep-alive timer, given that time, closes a connection that
  is still waiting for a whole request head then (a head trickled a line at a
  time, a connection that sends nothing, an idle kept-alive one);
* **the body**: read within ``api.body_timeout_seconds`` (:func:`hipq.api.io.read_json`
  answers 408 ``request_timeout``); a body left unread is drained for at most
  :data:`LINGER_SECONDS` before the connection closes;
* **the answer**: while the client takes none of it (the socket's buffer full and
  the transport paused) for ``api.send_timeout_seconds``, the connection is dropped
  with what it still held.

Refusals are logged once when a cap starts refusing, not per connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
from collections import Counter
from typing import Any, cast

from aiohttp import web

log = logging.getLogger(__name__)

LINGER_SECONDS = 2.0  # how long a body the handler left unread is drained, at most
_BODY = json.dumps({"error": {"code": "too_many_connections", "message": (
    "the daemon holds as many connections as it takes (from this address, or in "
    "all); try again"), "details": None}}).encode()
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
           b"Content-Length: " + str(len(_BODY)).encode() + b"\r\nRetry-After: 1\r\n"
           b"Connection: close\r\n\r\n" + _BODY)


def peer_of(transport: asyncio.BaseTransport) -> str:
    """Whom a connection counts against: its IPv4 address, or its IPv6 address's /64
    (one host has a whole /64 to pick from); an IPv4 address mapped in IPv6 is it."""
    peer = transport.get_extra_info("peername")
    host = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host  # a Unix socket's path, or nothing: one peer
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class ConnectionGate:
    """The connections held, in all and per peer, under both caps."""

    def __init__(self, *, total: int, per_peer: int) -> None:
        self.total, self.per_peer = total, per_peer
        self._held: Counter[str] = Counter()
        self._open = 0
        self._full = False  # the total cap refused since it last had room
        self._refusing: set[str] = set()  # peers refused since they last had room

    @property
    def open(self) -> int:
        return self._open

    def admit(self, peer: str) -> bool:
        """Count one more connection of ``peer``; False (counted nowhere) over a cap."""
        if self._open >= self.total:
            if not self._full:
                self._full = True
                log.warning("API connections refused: %d held (api.max_connections)",
                            self._open, extra={"action": "api_connections_full"})
            return False
        if self._held[peer] >= self.per_peer:
            if peer not in self._refusing:
                self._refusing.add(peer)
                log.warning("API connections of %s refused: %d held "
                            "(api.max_connections_per_peer)", peer, self._held[peer],
                            extra={"action": "api_peer_connections_full", "peer": peer})
            return False
        self._held[peer] += 1
        self._open += 1
        return True

    def release(self, peer: str) -> None:
        """One connection of ``peer`` admitted before has ended."""
        self._open -= 1
        self._held[peer] -= 1
        if self._held[peer] <= 0:
            del self._held[peer]
        self._full = self._full and self._open >= self.total
        self._refusing.discard(peer)


class GuardedConnection(web.RequestHandler):
    """An aiohttp request handler under the gate's caps and the deadlines of the
    module docstring. ``head_seconds`` is aiohttp's keep-alive timeout."""

    def __init__(self, manager: web.Server, *, gate: ConnectionGate, send_seconds: float,
                 head_seconds: float, **kwargs: Any) -> None:
        super().__init__(manager, keepalive_timeout=head_seconds,
                         lingering_time=LINGER_SECONDS, **kwargs)
        self._gate, self._send_seconds = gate, send_seconds
        self._peer: str | None = None  # None: refused (aiohttp never saw it)
        self._stall: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = peer_of(transport)
        if not self._gate.admit(peer):
            self.close()  # reads nothing of it
            refused = cast(asyncio.Transport, transport)  # a stream's, as aiohttp casts it
            refused.write(REFUSAL)
            refused.close()
            return
        self._peer = peer
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._peer is None:
            return
        self._gate.release(self._peer)
        self._peer = None
        self._unstall()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._peer is not None:
            super().data_received(data)

    # -- an answer the client does not take -------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall is None:
            self._stall = asyncio.get_running_loop().call_later(self._send_seconds,
                                                                self._stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._unstall()

    def _unstall(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _stalled(self) -> None:
        self._stall = None
        transport = self.transport
        if transport is not None:
            log.info("API connection dropped: its answer was not taken for %g s",
                     self._send_seconds, extra={"action": "api_send_timeout"})
            transport.abort()  # what it still held is dropped, not flushed

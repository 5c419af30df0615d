"""``hipq enqueue`` through the running daemon: a job enqueued over its API starts at
once, as one sent by any producer does; one written to the database waits for the
daemon's next tick (``reconcile.interval_seconds``) unless something wakes it.

The CLI trusts no listener (docs/operations.md, "hipq enqueue and a running daemon").
Whoever holds the config's API port (``api.host``, ``api.port``; a wildcard host is
reached on loopback) may be hipq's daemon, or a local process that bound the port
while the daemon was down and replays what ``/healthz`` showed. So before it sends a
token or the job, the CLI asks ``GET /healthz?nonce=N`` with a random nonce and checks
the answer's ``proof`` with the signing key it read from the database: only a daemon
that holds the key can answer, and the proof names the TCP connection it was made on
(both ends), so a listener that relays the question to a real daemon elsewhere gets a
proof that does not match. The job then goes on that same connection, never on a new
one (which would reach whoever holds the port by then), with ``$HIPQ_TOKEN`` or the
least-privileged token of ``api.tokens`` that may enqueue (a producer's; an admin's
only when there is no producer token). The exchange uses the standard library's
HTTP client: one socket, no redirects followed, no proxy from the environment.

When no daemon listens (the connection cannot be made, the API is disabled or the
port is ``0``), the job is written to the database, silently. When a listener is
there but proves nothing (another program, a daemon of another database or of an
older hipq, a relay, a daemon behind a forwarded port), or the proven daemon refuses
the token or fails, the job is written to the database too, with a warning on
stderr; a listener that proved nothing is never sent the job, so its 2xx is never
taken as the job stored. On PostgreSQL a NOTIFY then wakes the daemons
(``database.notify``).

Failure modes: a daemon that takes the request and does not answer in time may or
may not have stored the job; the job then goes to the database with the same id,
which stores it once (an enqueue is idempotent per id).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import os
import secrets
import socket
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from hipq.config import ApiConfig, Settings
from hipq.errors import ConflictError, HipqError, NotFound
from hipq.responses.signing import Signer, connection_name

log = logging.getLogger(__name__)

CONNECT_SECONDS = 1.0
ANSWER_SECONDS = 10.0  # the whole exchange once connected, however the bytes trickle
NONCE_BYTES = 32
MAX_ANSWER_BYTES = 1 << 20  # a daemon's answer to /healthz or to an enqueue is far less
TOKEN_ROLES = ("producer", "admin")  # those that may enqueue, least privileged first
_WILDCARD = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: str
    status: str  # created | exists


@dataclass(frozen=True, slots=True)
class Direct:
    """No daemon stored the job: the caller writes it to the database. ``warning``
    says why when a listener was there and did not serve; None when no daemon was
    to be reached."""

    warning: str | None = None


class Unproven(Exception):
    """The listener did not prove it holds the database's signing key on this
    connection (the message says how)."""


@dataclass(frozen=True, slots=True)
class _Where:
    host: str  # as the socket is given it (no brackets)
    port: int

    @property
    def base(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def _where(api: ApiConfig) -> _Where | None:
    if not api.enabled or api.port == 0:
        return None
    return _Where(_WILDCARD.get(api.host, api.host), api.port)


def api_base(api: ApiConfig) -> str | None:
    """Where this config's daemon would listen, as this machine reaches it; None
    when it does not listen (API disabled) or nobody can know where (port 0)."""
    where = _where(api)
    return None if where is None else where.base


def api_token(settings: Settings, env: dict[str, str] | None = None) -> str | None:
    """``$HIPQ_TOKEN``, else the least-privileged token of the config that may
    enqueue: a producer's, an admin's only when no producer token is configured."""
    env = dict(os.environ) if env is None else env
    if env.get("HIPQ_TOKEN"):
        return env["HIPQ_TOKEN"]
    for role in TOKEN_ROLES:
        found = next((t.token for t in settings.api.tokens if t.role == role), None)
        if found is not None:
            return found
    return None


async def enqueue_via_daemon(settings: Settings, queue: str, job_id: str,
                             body: dict[str, Any], *, signer: Signer) -> Enqueued | Direct:
    """PUT the job to the daemon of this config once it proved it holds ``signer``'s
    key; :class:`Direct` when no daemon takes it (the caller writes it to the
    database). Raises the proven daemon's refusal of the job itself (no such queue,
    a conflict, invalid input) as a :class:`HipqError`."""
    where = _where(settings.api)
    if where is None:
        return Direct()
    put = _Put(path=f"/v1/jobs/{quote(queue, safe='')}/{quote(job_id, safe='')}",
               body=json.dumps(body).encode(), token=api_token(settings), job_id=job_id)
    return await asyncio.to_thread(_through_daemon, where, signer, put)


@dataclass(frozen=True, slots=True)
class _Put:
    path: str
    body: bytes
    token: str | None
    job_id: str


def _through_daemon(where: _Where, signer: Signer, put: _Put) -> Enqueued | Direct:
    """The whole exchange on one connection (in a thread: the standard library's
    client blocks), cut off after :data:`ANSWER_SECONDS` however slowly the
    listener drips its answer."""
    conn = http.client.HTTPConnection(where.host, where.port, timeout=CONNECT_SECONDS)
    try:
        try:
            conn.connect()
        except OSError as exc:  # nobody listens there
            log.debug("enqueue: no daemon at %s (%s); writing to the database", where.base,
                      exc, extra={"action": "cli_enqueue_direct"})
            return Direct()
        sock = conn.sock
        sock.settimeout(ANSWER_SECONDS)
        deadline = threading.Timer(ANSWER_SECONDS, _cut, (sock,))
        deadline.daemon = True
        deadline.start()
        try:
            return _exchange(conn, sock, signer, put, where.base)
        finally:
            deadline.cancel()
    except Unproven as exc:
        return Direct(f"the listener at {where.base} did not prove it is this database's "
                      f"daemon ({exc}); writing the job to the database instead")
    except (OSError, http.client.HTTPException) as exc:
        return Direct(f"the listener at {where.base} broke off or did not answer in time "
                      f"({type(exc).__name__}); writing the job to the database instead")
    finally:
        conn.close()


def _exchange(conn: http.client.HTTPConnection, sock: socket.socket, signer: Signer,
              put: _Put, base: str) -> Enqueued | Direct:
    _prove(conn, signer)
    if conn.sock is not sock:  # the daemon closed the proven connection
        raise Unproven("it closed the connection it proved itself on")
    return _send(conn, put, base)


def _cut(sock: socket.socket) -> None:
    """Ends the exchange: whatever the client waits for on ``sock`` fails at once."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _prove(conn: http.client.HTTPConnection, signer: Signer) -> None:
    """Raises :class:`Unproven` unless the listener answers ``/healthz`` as this
    database's daemon: its ``instance``, and its proof of a fresh nonce on this
    connection (no token is sent: anyone may ask ``/healthz``)."""
    nonce = secrets.token_hex(NONCE_BYTES)
    conn.request("GET", f"/healthz?nonce={nonce}", headers={"Accept": "application/json"})
    status, payload = _answer(conn)
    if not (status == 200 and isinstance(payload, dict) and payload.get("status") == "ok"):
        raise Unproven(f"/healthz answered {status}, not as hipq does")
    if payload.get("instance") != signer.instance():
        raise Unproven("its /healthz names another database")
    sock = conn.sock
    connection = None if sock is None else connection_name(sock.getpeername(),
                                                           sock.getsockname())
    if connection is None or not signer.proves(payload.get("proof"), nonce, connection):
        raise Unproven("no valid proof of the signing key on this connection; a relay or "
                       "a forwarded port proves nothing")


def _send(conn: http.client.HTTPConnection, put: _Put, base: str) -> Enqueued | Direct:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if put.token:
        headers["Authorization"] = f"Bearer {put.token}"
    conn.request("PUT", put.path, body=put.body, headers=headers)
    status, payload = _answer(conn)
    return _outcome(status, payload, put.job_id, base)


def _answer(conn: http.client.HTTPConnection) -> tuple[int, Any]:
    """The status and the JSON of the answer (None if it is not JSON, or too long
    to be hipq's); read to its end, so the connection serves again."""
    answer = conn.getresponse()
    raw = answer.read(MAX_ANSWER_BYTES + 1)
    if len(raw) > MAX_ANSWER_BYTES:
        return answer.status, None
    try:
        return answer.status, json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return answer.status, None


def _outcome(status: int, payload: Any, job_id: str, base: str) -> Enqueued | Direct:
    if status in (200, 201):
        return Enqueued(id=job_id, status="created" if status == 201 else "exists")
    message = _message(payload)
    if status in (401, 403, 503) or message is None:  # not allowed, not ready, or odd
        return Direct(f"the daemon at {base} answered {status} to the enqueue; writing "
                      "the job to the database instead")
    if status == 404:
        raise NotFound(message)
    if status == 409:
        raise ConflictError(message)
    raise HipqError(message)


def _message(payload: Any) -> str | None:
    error = payload.get("error") if isinstance(payload, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else None

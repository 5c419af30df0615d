"""``hipq enqueue`` through the running daemon: a job enqueued over its API starts at
once, as one sent by any producer does; one written to the database waits for the
daemon's next tick (``reconcile.interval_seconds``) unless something wakes it.

The daemon is looked for at the config's own API address (``api.host``, ``api.port``;
a wildcard host is reached on loopback), with ``$HIPQ_TOKEN`` or a producer or admin
token of ``api.tokens``. It must answer ``/healthz`` as hipq does before a job is sent.
When no daemon listens there (the connection is refused, or the port is ``0``), when
the API is disabled, when the daemon there works on another database (its
``/healthz`` ``instance``), or the daemon refuses the token, the job is written to the
database as before; on PostgreSQL a NOTIFY then wakes the daemons (``database.notify``).

Failure modes: a daemon that takes the request and does not answer in time may or
may not have stored the job; the job then goes to the database with the same id,
which stores it once (an enqueue is idempotent per id).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from hipq.config import ApiConfig, Settings
from hipq.errors import ConflictError, HipqError, NotFound

log = logging.getLogger(__name__)

CONNECT_SECONDS = 1.0
ANSWER_SECONDS = 10.0
ENQUEUE_ROLES = ("producer", "admin")
_WILDCARD = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: str
    status: str  # created | exists


def api_base(api: ApiConfig) -> str | None:
    """Where this config's daemon would listen, as this machine reaches it; None
    when it does not listen (API disabled) or nobody can know where (port 0)."""
    if not api.enabled or api.port == 0:
        return None
    host = _WILDCARD.get(api.host, api.host)
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{api.port}"


def api_token(settings: Settings, env: dict[str, str] | None = None) -> str | None:
    """``$HIPQ_TOKEN``, else the first token of the config that may enqueue."""
    env = dict(os.environ) if env is None else env
    if env.get("HIPQ_TOKEN"):
        return env["HIPQ_TOKEN"]
    return next((t.token for t in settings.api.tokens if t.role in ENQUEUE_ROLES), None)


async def enqueue_via_daemon(settings: Settings, queue: str, job_id: str,
                             body: dict[str, Any], *, instance: str) -> Enqueued | None:
    """PUT the job to the daemon of this config; None when no daemon takes it (the
    caller writes it to the database). ``instance``: what this config's database is
    called (:meth:`~hipq.responses.signing.Signer.instance`); a daemon that answers
    on the port with another one (another project's, on the same default port) is
    not this config's and is left alone. Raises the daemon's refusal of the job
    itself (no such queue, a conflict, invalid input) as a :class:`HipqError`."""
    base = api_base(settings.api)
    if base is None:
        return None
    token = api_token(settings)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = aiohttp.ClientTimeout(total=ANSWER_SECONDS, sock_connect=CONNECT_SECONDS)
    try:
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            if not await _is_hipq(session, base, instance):
                return None
            url = f"{base}/v1/jobs/{quote(queue, safe='')}/{quote(job_id, safe='')}"
            async with session.put(url, json=body) as answer:
                payload = await _json(answer)
                return _outcome(answer.status, payload, job_id)
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.debug("enqueue: no daemon answered at %s (%s); writing to the database",
                  base, exc, extra={"action": "cli_enqueue_direct"})
        return None


async def _is_hipq(session: aiohttp.ClientSession, base: str, instance: str) -> bool:
    """The listener answers ``/healthz`` as hipq does (not some other program), on
    the same database (``instance``)."""
    async with session.get(f"{base}/healthz") as answer:
        payload = await _json(answer)
    if not (isinstance(payload, dict) and payload.get("status") == "ok"):
        return False
    if payload.get("instance") != instance:
        log.info("enqueue: the daemon at %s works on another database; writing to this "
                 "config's", base, extra={"action": "cli_enqueue_direct"})
        return False
    return True


async def _json(answer: aiohttp.ClientResponse) -> Any:
    try:
        return await answer.json(content_type=None)
    except ValueError:
        return None


def _outcome(status: int, payload: Any, job_id: str) -> Enqueued | None:
    if status in (200, 201):
        return Enqueued(id=job_id, status="created" if status == 201 else "exists")
    if status in (401, 403, 503) or not isinstance(payload, dict):
        return None  # not allowed, not ready, or not hipq's answer: the database path
    error = payload.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str):
        return None
    if status == 404:
        raise NotFound(message)
    if status == 409:
        raise ConflictError(message)
    raise HipqError(message)

"""Serving the API: bind, report the bound port (``port: 0`` picks a free one), stop.

Each connection is held under the caps and deadlines of :mod:`hipq.api.connections`
(slow clients), and the process's open-file limit is raised, within its hard limit,
to what ``api.max_connections`` needs (a warning when it cannot be).

aiohttp answers a request it cannot parse (a request line or a header over 8,190
bytes, a malformed line, a bad method) itself, before any handler or middleware
runs, in ``text/plain``. The API speaks JSON only (docs/http-api.md), so each
connection here is a :class:`JsonErrorRequestHandler`, whose ``handle_error``
answers those errors with the same ``{"error": {...}}`` body as every other one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import socket
from http import HTTPStatus

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMethod, LineTooLong

from hipq.api.app import create_app
from hipq.api.connections import ConnectionGate, GuardedConnection
from hipq.api.deps import ApiDeps
from hipq.config import ApiConfig

log = logging.getLogger(__name__)

SHUTDOWN_SECONDS = 5.0
# open files beside the API's connections: the database pool, the targets'
# connections, Kafka, logs (hipq.targets.http_pool bounds the targets' per origin)
OTHER_FILES = 1024


def enough_files(connections: int) -> None:
    """Raise the soft open-file limit to ``connections`` and :data:`OTHER_FILES`,
    within the hard limit; a warning when the hard limit is lower (raise it:
    ``LimitNOFILE`` in deploy/hipq.service, ``ulimit -n``)."""
    want = connections + OTHER_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return
    raised = want if hard == resource.RLIM_INFINITY else min(want, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    except (OSError, ValueError):
        raised = soft
    if raised < want:
        log.warning("the open-file limit (%d) is low for api.max_connections (%d): raise "
                    "it to %d (LimitNOFILE, ulimit -n) or lower api.max_connections",
                    raised, connections, want, extra={"action": "open_file_limit_low"})


def _low_level_error(status: int, exc: BaseException | None) -> tuple[str, str]:
    """The code and message of an error aiohttp's server answers itself. The
    message never echoes the request (aiohttp's own does: its first bytes, which
    may hold a signature or a token)."""
    if isinstance(exc, LineTooLong):
        return "line_too_long", "the request line or a header is too long"
    if isinstance(exc, BadHttpMethod):
        return "bad_request", "the request method is not valid"
    if status >= 500:
        return ("timeout", "the request took too long") if status == 504 else (
            "internal", "internal error (logged)")
    return "bad_request", f"the request is not valid HTTP ({HTTPStatus(status).phrase})"


class JsonErrorRequestHandler(GuardedConnection):
    """One connection of the API: aiohttp's own error answers (the request could
    not be parsed; a handler escaped the middleware) as JSON."""

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        super().handle_error(request, status, exc, message)  # logs; refuses once sent
        code, text = _low_level_error(status, exc)
        body = json.dumps({"error": {"code": code, "message": text, "details": None}})
        response = web.Response(status=status, text=body, content_type="application/json")
        response.force_close()
        return response


class JsonErrorSite(web.SockSite):
    """A :class:`~aiohttp.web.SockSite` whose connections are
    :class:`JsonErrorRequestHandler`, all under one :class:`ConnectionGate`."""

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, *, config: ApiConfig,
                 gate: ConnectionGate) -> None:
        super().__init__(runner, sock)
        self._config, self._gate = config, gate

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site (SockSite.start would serve)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None, "the runner is set up first"
        config, gate = self._config, self._gate

        def connection() -> JsonErrorRequestHandler:
            # access_log=None: no access log, as the runner is told
            return JsonErrorRequestHandler(
                server, gate=gate, head_seconds=config.head_timeout_seconds,
                send_seconds=config.send_timeout_seconds, loop=loop, access_log=None)

        self._server = await loop.create_server(connection, sock=self._sock,
                                                backlog=self._backlog)


class ApiServer:
    def __init__(self, deps: ApiDeps) -> None:
        self.deps = deps
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        config = deps.config
        self._gate = ConnectionGate(total=config.max_connections,
                                    per_peer=config.max_connections_per_peer)

    @property
    def open_connections(self) -> int:
        """The connections held now (refused ones are never counted)."""
        return self._gate.open

    @property
    def url(self) -> str:
        host = self.deps.config.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    async def start(self) -> int:
        """Bind and serve; returns the bound port."""
        runner = web.AppRunner(create_app(self.deps), access_log=None,
                               shutdown_timeout=SHUTDOWN_SECONDS)
        await runner.setup()
        config = self.deps.config
        enough_files(config.max_connections)
        try:
            family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
            sock = socket.create_server((config.host, config.port), family=family)
            await JsonErrorSite(runner, sock, config=config, gate=self._gate).start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(sock.getsockname()[1])
        log.info("API listening on %s", self.url, extra={"action": "api_listening"})
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

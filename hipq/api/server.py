"""Serving the API: bind, report the bound port (``port: 0`` picks a free one), stop.

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
import socket
from http import HTTPStatus

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMethod, LineTooLong

from hipq.api.app import create_app
from hipq.api.deps import ApiDeps

log = logging.getLogger(__name__)

SHUTDOWN_SECONDS = 5.0


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


class JsonErrorRequestHandler(web.RequestHandler):
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
    :class:`JsonErrorRequestHandler`."""

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site (SockSite.start would serve)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None, "the runner is set up first"

        def connection() -> JsonErrorRequestHandler:
            # access_log=None: no access log, as the runner is told (typed Logger only)
            return JsonErrorRequestHandler(server, loop=loop, access_log=None)  # type: ignore[arg-type]

        self._server = await loop.create_server(connection, sock=self._sock,
                                                backlog=self._backlog)


class ApiServer:
    def __init__(self, deps: ApiDeps) -> None:
        self.deps = deps
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

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
        try:
            family = socket.AF_INET6 if ":" in self.deps.config.host else socket.AF_INET
            sock = socket.create_server((self.deps.config.host, self.deps.config.port),
                                        family=family)
            await JsonErrorSite(runner, sock).start()
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

"""Serving the API: bind, report the bound port (``port: 0`` picks a free one), stop."""

from __future__ import annotations

import logging
import socket

from aiohttp import web

from hipq.api.app import create_app
from hipq.api.deps import ApiDeps

log = logging.getLogger(__name__)

SHUTDOWN_SECONDS = 5.0


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
            await web.SockSite(runner, sock).start()
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

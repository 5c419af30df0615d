"""The dashboard (docs/operations.md): one page of plain HTML, CSS and JS shipped in
the package (``static/``), served at ``/`` with its script and style at
``/dashboard/app.js`` and ``/dashboard/style.css`` (open routes, no CDN, no build
step). Everything it shows comes from the API with the token the page asks for
(kept in the browser's session storage); ``GET /v1/whoami`` tells it which buttons
the token's role may use.

Every answer of these routes carries :data:`PAGE_HEADERS`: a Content-Security-Policy
that allows scripts and styles from the daemon only (no inline script, so text
that slipped into the page could not run) and no framing (``frame-ancestors
'none'``, ``X-Frame-Options: DENY``: no page can overlay the buttons)."""

from __future__ import annotations

from functools import cache
from importlib import resources

from aiohttp import web
from pydantic import Field

from hipq.api.auth import Role, TokenAuth
from hipq.api.deps import DEPS
from hipq.api.io import reply
from hipq.api.models import _Out

CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")
PAGE_HEADERS = {"Cache-Control": "no-cache", "Content-Security-Policy": CSP,
                "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer"}


@cache
def asset(name: str) -> str:
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


@cache
def page(auth: bool) -> str:
    return asset("index.html").replace("/*AUTH*/", "true" if auth else "false")


async def dashboard(request: web.Request) -> web.Response:
    auth = bool(request.app[DEPS].config.tokens)
    return web.Response(text=page(auth), content_type="text/html", headers=PAGE_HEADERS)


async def script(request: web.Request) -> web.Response:
    return web.Response(text=asset("app.js"), content_type="text/javascript",
                        headers=PAGE_HEADERS)


async def style(request: web.Request) -> web.Response:
    return web.Response(text=asset("style.css"), content_type="text/css",
                        headers=PAGE_HEADERS)


class WhoAmI(_Out):
    role: str = Field(description="admin | producer | reader")
    auth: bool = Field(description="whether this API needs tokens")
    trace_url: str | None = Field(
        default=None, description="dashboard.trace_url: where a job's trace is shown, "
        "{trace_id} standing for its trace id (docs/traces.md); null when not set")


async def whoami(request: web.Request) -> web.Response:
    deps = request.app[DEPS]
    tokens, trace_url = deps.config.tokens, deps.trace_url
    if not tokens:
        return reply(WhoAmI(role="admin", auth=False, trace_url=trace_url))
    _, _, presented = request.headers.get("Authorization", "").partition(" ")
    role = TokenAuth(tokens).role_of(presented.strip()) or Role.READER
    return reply(WhoAmI(role=role.name.lower(), auth=True, trace_url=trace_url))

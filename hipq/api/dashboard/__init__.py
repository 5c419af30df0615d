"""The dashboard (SPEC 10): one page of plain HTML, CSS and JS shipped in the
package (``static/``), served at ``/`` with its assets inlined (one open route, no
CDN, no build step). Everything it shows comes from the API with the token the
page asks for (kept in the browser's session storage); ``GET /v1/whoami`` tells
it which buttons the token's role may use."""

from __future__ import annotations

from functools import cache
from importlib import resources

from aiohttp import web
from pydantic import Field

from hipq.api.auth import Role, TokenAuth
from hipq.api.deps import DEPS
from hipq.api.io import reply
from hipq.api.models import _Out


@cache
def page(auth: bool) -> str:
    static = resources.files(__package__).joinpath("static")
    html = static.joinpath("index.html").read_text(encoding="utf-8")
    return (html.replace("/*STYLE*/", static.joinpath("style.css").read_text(encoding="utf-8"))
            .replace("/*AUTH*/", "true" if auth else "false")
            .replace("/*SCRIPT*/", static.joinpath("app.js").read_text(encoding="utf-8")))


async def dashboard(request: web.Request) -> web.Response:
    auth = bool(request.app[DEPS].config.tokens)
    return web.Response(text=page(auth), content_type="text/html",
                        headers={"Cache-Control": "no-cache"})


class WhoAmI(_Out):
    role: str = Field(description="admin | producer | reader")
    auth: bool = Field(description="whether this API needs tokens")


async def whoami(request: web.Request) -> web.Response:
    tokens = request.app[DEPS].config.tokens
    if not tokens:
        return reply(WhoAmI(role="admin", auth=False))
    _, _, presented = request.headers.get("Authorization", "").partition(" ")
    role = TokenAuth(tokens).role_of(presented.strip()) or Role.READER
    return reply(WhoAmI(role=role.name.lower(), auth=True))

"""``create_app(deps)``: the aiohttp application of the HTTP API."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from aiohttp import web

from hipq.api.api_errors import error_middleware
from hipq.api.auth import ROLE_KEY, TokenAuth
from hipq.api.deps import DEPS, ApiDeps
from hipq.api.io import refuse_simple_content_type
from hipq.api.openapi import build_openapi
from hipq.api.origin import SameOrigin
from hipq.api.outcome_history import install as keep_outcome_history
from hipq.api.routes import ROUTES, Handler, Route
from hipq.api.stats_cache import STATS, StatsCache
from hipq.config import ApiConfig

API_VERSION = "1"


def effective_routes(config: ApiConfig) -> list[Route]:
    """The route table under this config: ``/metrics`` is open unless protected."""
    return [replace(r, role=None) if r.path == "/metrics" and not config.protect_metrics else r
            for r in ROUTES]


def _guarded(route: Route, auth: TokenAuth, pages: SameOrigin) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        pages.check(request)  # before auth: no other site may change anything
        refuse_simple_content_type(request)
        role = auth.check(request, route.role)
        if role is not None:
            request[ROLE_KEY] = role
        return await route.handler(request)

    return handler


def _register(app: web.Application, routes: list[Route], auth: TokenAuth,
              pages: SameOrigin) -> None:
    """One resource per path, concrete paths before templated ones (OpenAPI's
    matching: ``/v1/jobs/{queue}/pause`` is never the job ``pause``), each
    answering any other method with 405 and ``Allow``: its own methods only."""
    by_path: dict[str, list[Route]] = {}
    for route in routes:
        by_path.setdefault(route.path, []).append(route)
    for path in sorted(by_path, key=lambda p: p.count("{")):
        resource = app.router.add_resource(path)
        for route in by_path[path]:
            resource.add_route(route.method, _guarded(route, auth, pages))
        resource.add_route("*", _not_allowed(sorted({r.method for r in by_path[path]})))


def _not_allowed(methods: list[str]) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        raise web.HTTPMethodNotAllowed(request.method, methods)

    return handler


def create_app(deps: ApiDeps) -> web.Application:
    app = web.Application(middlewares=[error_middleware],
                          client_max_size=deps.config.max_body_bytes)
    app[DEPS] = deps
    app[STATS] = StatsCache(deps.service, max_age=deps.config.stats_max_age_seconds)
    keep_outcome_history(app)  # GET /v1/outcomes (hipq/api/outcome_history.py)
    auth, pages = TokenAuth(deps.config.tokens), SameOrigin(deps.config)
    routes = effective_routes(deps.config)
    _register(app, routes, auth, pages)
    document: list[str] = []  # made at the first request: 25 ms, and 0.7 MB a daemon
    # that is never asked need not hold (docs/benchmarks.md, "Idle memory")

    async def openapi(request: web.Request) -> web.Response:
        if not document:
            document.append(json.dumps(build_openapi(routes, version=API_VERSION)))
        return web.Response(text=document[0], content_type="application/json")

    app.router.add_get("/openapi.json", openapi)
    return app


def openapi_document(config: ApiConfig | None = None) -> dict[str, Any]:
    return build_openapi(effective_routes(config or ApiConfig()), version=API_VERSION)

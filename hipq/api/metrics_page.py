"""``GET /metrics``: the daemon's Prometheus registry (see :mod:`hipq.metrics`).
The queue gauges are refreshed from the store at most every 2 s, however often
Prometheus (or several of them) scrape."""

from __future__ import annotations

import weakref

from aiohttp import web

from hipq.api.deps import DEPS
from hipq.metrics import CONTENT_TYPE, Metrics

# an API served without a daemon (tests, embedders): its own registry, queue gauges only
_fallback: weakref.WeakKeyDictionary[web.Application, Metrics] = weakref.WeakKeyDictionary()


def _metrics(app: web.Application) -> Metrics:
    deps = app[DEPS]
    if deps.metrics is not None:
        return deps.metrics
    found = _fallback.get(app)
    if found is None:
        found = _fallback[app] = Metrics(monotonic=deps.service.clock.monotonic)
    return found


async def metrics(request: web.Request) -> web.Response:
    registry = _metrics(request.app)
    await registry.refresh_gauges(request.app[DEPS].service.stats)
    return web.Response(body=registry.render(), headers={"Content-Type": CONTENT_TYPE})

"""``GET /metrics``: the daemon's Prometheus registry (see :mod:`hipq.metrics`).
The queue gauges are refreshed at most every 2 s, however often Prometheus (or
several of them) scrape: each refresh renews the snapshot the queue routes share
(:mod:`hipq.api.stats_cache`: counts, the partner's word and the intake) and reads
the queue list (each queue's concurrency settings), and what the owners wrote of the
declared partners (one row each: hipq.api.partners_page)."""

from __future__ import annotations

import weakref

from aiohttp import web

from hipq.api.deps import DEPS
from hipq.api.partners_page import partner_gauges
from hipq.api.stats_cache import STATS
from hipq.metrics import CONTENT_TYPE, GaugeReading, Metrics

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


async def _reading(app: web.Application) -> GaugeReading:
    service = app[DEPS].service
    snapshot = await app[STATS].get(max_age=0)  # the gauges are cached (hipq.metrics)
    records = await service.list_queues()
    now = service.clock.now()
    return (snapshot.queues, [snapshot.word(r.id, r.spec, now) for r in records],
            snapshot.intake, await partner_gauges(app))


async def metrics(request: web.Request) -> web.Response:
    # prometheus_client is loaded at the first scrape, not with the API
    from hipq.metrics_export import render

    counts = _metrics(request.app)
    await counts.refresh_gauges(lambda: _reading(request.app))
    return web.Response(body=render(counts), headers={"Content-Type": CONTENT_TYPE})

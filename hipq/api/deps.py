"""What the HTTP API needs from the rest of hipq (built by the daemon or a test)."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from hipq.config import ApiConfig
from hipq.metrics import Metrics
from hipq.responses.signing import Signer
from hipq.service import Hipq


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiDeps:
    service: Hipq
    config: ApiConfig
    signer: Signer
    metrics: Metrics | None = None  # None: /metrics shows the queue gauges only


DEPS = web.AppKey("hipq_deps", ApiDeps)

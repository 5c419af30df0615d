"""What the HTTP API needs from the rest of hipq (built by the daemon or a test)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from hipq.config import ApiConfig
from hipq.metrics import Metrics
from hipq.responses.signing import Signer
from hipq.service import Hipq

if TYPE_CHECKING:
    from hipq.schedules import Schedules


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiDeps:
    service: Hipq
    config: ApiConfig
    signer: Signer
    schedules: Schedules | None = None  # GET /v1/schedules (hipq/api/schedules_page.py)
    metrics: Metrics | None = None  # None: /metrics shows the queue gauges only


DEPS = web.AppKey("hipq_deps", ApiDeps)

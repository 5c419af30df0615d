"""What the HTTP API needs from the rest of hipq (built by the daemon or a test)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from hipq.config import ApiConfig, QueueConfig
from hipq.metrics import Metrics
from hipq.responses.signing import Signer
from hipq.service import Hipq
from hipq.spec import PartnerSpec

if TYPE_CHECKING:
    from hipq.schedules import Schedules


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiDeps:
    service: Hipq
    config: ApiConfig
    signer: Signer
    schedules: Schedules | None = None  # GET /v1/schedules (hipq/api/schedules_page.py)
    metrics: Metrics | None = None  # None: /metrics shows the queue gauges only
    # the queues of the daemon's config file: an API update of one says so
    # (docs/configuration.md, "Queues from the file and from the API")
    declared_queues: Mapping[str, QueueConfig] = field(default_factory=dict)
    trace_url: str | None = None  # dashboard.trace_url: the job page's trace link
    # the partners declared in the settings (GET /v1/partners, hipq/api/partners_page.py)
    partners: Mapping[str, PartnerSpec] = field(default_factory=dict)


DEPS = web.AppKey("hipq_deps", ApiDeps)

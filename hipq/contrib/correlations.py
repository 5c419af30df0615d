"""An example correlation plugin: ``correlation: {plugin: "hipq.contrib.correlations:order_key"}``.

hipq calls it with ``side="request"`` when a job is enqueued (scope: ``id``,
``queue``, ``data``; return the job's fixed key, or None for the default
per-attempt key) and with ``side="response"`` for a response posted to
``/v1/inbox/{queue}`` (scope: ``body``, ``query``, ``path``) or read from Kafka
(scope: ``key``, ``value``, ``headers``); return the key it names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def order_key(scope: Mapping[str, Any], *, side: str) -> str | None:
    if side == "request":
        order = scope["data"].get("order_id")
        return None if order is None else f"order-{order}"
    body = scope.get("body") or scope.get("value") or {}
    order = body.get("orderId") if isinstance(body, Mapping) else None
    if order is None:
        order = (scope.get("query") or {}).get("order")
    return f"order-{order}"

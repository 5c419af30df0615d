"""A correlation plugin: ``correlation: {plugin: "plugins.example_correlations:invoice_key"}``.

Matches a partner's answers to jobs by the invoice they are about, however the
partner spells it. hipq calls the function with ``side="request"`` when a job is
enqueued (scope: ``id``, ``queue``, ``data``; return the job's fixed key, or None
for hipq's own per-try key) and ``side="response"`` for a response posted to
``/v1/inbox/{queue}`` (scope: ``body``, ``query``, ``path``) or read from Kafka
(scope: ``key``, ``value``, ``headers``; return the key it names). A response
without an invoice number raises: it is not this queue's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def invoice_key(scope: Mapping[str, Any], *, side: str) -> str | None:
    if side == "request":
        number = scope["data"].get("invoice")
        return None if number is None else f"invoice-{number}"
    body = scope.get("body") if scope.get("body") is not None else scope.get("value")
    body = body if isinstance(body, Mapping) else {}
    number = body.get("invoiceNumber", body.get("invoice_number"))
    if number is None:
        number = (scope.get("query") or {}).get("invoice")
    if number is None or isinstance(number, bool):
        raise ValueError("the response names no invoice")
    return f"invoice-{number}"

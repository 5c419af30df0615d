"""The HTTP API (docs/http-api.md): ``create_app(deps)``, the route table, its models,
the error middleware, auth, and the OpenAPI document.

The names below are imported on first use (PEP 562), so that the wire models
(``hipq.api.models``) load without the aiohttp server (``hipq.client`` uses them).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hipq.api.app import create_app, openapi_document
    from hipq.api.deps import ApiDeps
    from hipq.api.server import ApiServer

_SOURCES = {"ApiDeps": "hipq.api.deps", "ApiServer": "hipq.api.server",
            "create_app": "hipq.api.app", "openapi_document": "hipq.api.app"}

__all__ = ["ApiDeps", "ApiServer", "create_app", "openapi_document"]


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'hipq.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value

"""Correlation-key templates: ``"{data.order_id}:{data.version}"``.

A template is text with ``{dotted.path}`` fields looked up in a mapping (for a
request: ``id``, ``queue``, ``data``; for a Kafka response: ``key``, ``value``,
``headers``; for an HTTP response: ``body``, ``path``, ``query``). A missing
field makes the template fail with :class:`TemplateError` rather than produce a
half-made key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hipq.errors import ValidationError

_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_-]+)*)\}")


class TemplateError(ValidationError):
    code = "correlation_template"


def lookup(path: str, scope: Mapping[str, Any]) -> Any:
    node: Any = scope
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise TemplateError(f"correlation template field {{{path}}} is missing")
    if node is None or isinstance(node, Mapping | list):
        raise TemplateError(f"correlation template field {{{path}}} is not a scalar")
    return node


def render(template: str, scope: Mapping[str, Any]) -> str:
    key = _FIELD.sub(lambda m: str(lookup(m.group(1), scope)), template)
    if not key:
        raise TemplateError("correlation template produced an empty key")
    return key

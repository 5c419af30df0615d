"""Correlation-key templates: ``"{data.order_id}:{data.version}"``.

A template is text with ``{dotted.path}`` fields looked up in a mapping (for a
request: ``id``, ``queue``, ``data``; for a Kafka response: ``key``, ``value``,
``headers``; for an HTTP response: ``body``, ``path``, ``query``). A missing
field makes the template fail with :class:`TemplateError` rather than produce a
half-made key.

Instead of templates a queue may name a plugin, ``{plugin: "module:attr"}``: a
function ``fn(scope, *, side)`` with ``side`` ``"request"`` (return the job's fixed
key, or None for the default per-attempt key) or ``"response"`` (return the key).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from hipq.config import CorrelationConfig
from hipq.errors import HipqError, ValidationError
from hipq.paths import MISSING, as_text, lookup
from hipq.plugins import load_object
from hipq.values import text_problem

MAX_KEY_LENGTH = 500
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_-]+)*)\}")


class TemplateError(ValidationError):
    code = "correlation_template"


def field(path: str, scope: Mapping[str, Any]) -> str:
    """The field at ``path`` as text (:mod:`hipq.paths`); TemplateError if it is
    missing or not a scalar."""
    value = lookup(scope, path)
    if value is MISSING:
        raise TemplateError(f"correlation template field {{{path}}} is missing")
    text = as_text(value)
    if text is None:
        raise TemplateError(f"correlation template field {{{path}}} is not a scalar")
    return text


def render(template: str, scope: Mapping[str, Any]) -> str:
    literals, paths = _compiled(template)
    out = [literals[0]]
    for path, literal in zip(paths, literals[1:], strict=True):
        out.append(_field_fast(path, scope))
        out.append(literal)
    return _checked("".join(out))


@lru_cache(maxsize=256)
def _compiled(template: str) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """A template as its literal parts and, between them, its fields' paths (split):
    ``"{a.b}:{c}"`` is ``("", ":", "")`` and ``(("a", "b"), ("c",))``."""
    parts = _FIELD.split(template)  # literal, path, literal, path, ..., literal
    return tuple(parts[0::2]), tuple(tuple(p.split(".")) for p in parts[1::2])


def _field_fast(path: tuple[str, ...], scope: Mapping[str, Any]) -> str:
    """:func:`field` over a split path, plain dicts and strings without the general
    lookup (the common case of a template over JSON objects); anything else goes
    the general way, so both always agree."""
    node: Any = scope
    for part in path:
        if type(node) is not dict or part not in node:
            return field(".".join(path), scope)
        node = node[part]
    kind = type(node)  # as_text: a string as it is, an int as written (not a bool)
    return str(node) if kind is str or kind is int else field(".".join(path), scope)


def _checked(key: str) -> str:
    if not key:
        raise TemplateError("correlation template produced an empty key")
    if len(key) > MAX_KEY_LENGTH or text_problem(key) is not None:
        raise TemplateError(f"a correlation key must be 1-{MAX_KEY_LENGTH} characters "
                            "of valid Unicode without NUL")
    return key


def check(config: CorrelationConfig | None) -> None:
    """Fail early (:class:`~hipq.errors.ConfigError`) if the plugin cannot be loaded."""
    if config is not None and config.plugin and not callable(load_object(config.plugin)):
        raise TemplateError(f"correlation plugin {config.plugin!r} is not callable")


def _plugin_key(plugin: str, side: str, scope: Mapping[str, Any]) -> str | None:
    fn = load_object(plugin)
    try:
        key = fn(scope, side=side)
    except HipqError:
        raise
    except Exception as exc:
        raise TemplateError(f"correlation plugin {plugin!r} raised: {exc!r}"[:500]) from None
    if key is None:
        return None
    if not isinstance(key, str):
        raise TemplateError(f"correlation plugin {plugin!r} returned {key!r}, not a string")
    return _checked(key)


def request_key(config: CorrelationConfig | None, scope: Mapping[str, Any]) -> str | None:
    """The fixed key of a new job (scope: ``id``, ``queue``, ``data``), or None for
    the default: a fresh key per attempt."""
    if config is None:
        return None
    if config.plugin:
        return _plugin_key(config.plugin, "request", scope)
    return render(config.request, scope) if config.request else None


def response_key(config: CorrelationConfig | None, scope: Mapping[str, Any]) -> str:
    """The key an incoming response names (HTTP scope: ``body``, ``path``, ``query``;
    Kafka: ``key``, ``value``, ``headers``). A plugin is called as
    ``fn(scope, side="response")`` and must return a non-empty string."""
    key = None
    if config is not None and config.plugin:
        key = _plugin_key(config.plugin, "response", scope)
    elif config is not None and config.response:
        key = render(config.response, scope)
    if key is None:
        raise TemplateError("this queue has no correlation 'response' template or plugin")
    return key

"""Dotted paths into JSON values: ``order.id``, ``items.0.sku``.

One lookup and one rendering for every place a setting names a field of a job's
data or of a response (quota fields, rate-limit ``by``, correlation templates,
Kafka response fields), so that they agree on what a path finds and how a value
reads as text:

* each segment names a key of an object, or (all digits) an index of an array;
* :func:`lookup` returns the value found, or :data:`MISSING`;
* :func:`as_text` renders a scalar as it reads in JSON: a string as it is,
  ``true``/``false``, a number as written (``7``, ``1.5``); ``null``, objects and
  arrays are not scalars (None).

Pure: imports nothing beyond the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()  # what lookup returns when the path finds nothing


def lookup(node: Any, path: str) -> Any:
    """The value at ``path`` in ``node`` (objects by key, arrays by index), or
    :data:`MISSING`."""
    for part in path.split("."):
        if isinstance(node, Mapping):
            if part not in node:
                return MISSING
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node


def as_text(value: Any) -> str | None:
    """A scalar as it reads in JSON (``true``, ``7``, ``"a"`` -> ``a``); None for
    anything else (missing, ``null``, an object, an array)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None


def field_text(node: Any, path: str) -> str | None:
    """The scalar at ``path`` as text (:func:`as_text` of :func:`lookup`)."""
    return as_text(lookup(node, path))

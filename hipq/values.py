"""The one check of JSON values that come from outside (docs/security.md, "Hostile input").

Every value a client or a downstream hands us (a job's ``data``, a response's
``result`` and ``error``, a whole API body, a Kafka response) must be storable on
both databases and readable back: so it may nest at most :data:`MAX_DEPTH`
levels, its numbers are finite, its integers fit a signed 64-bit column, and its
text holds no NUL character (PostgreSQL refuses them) and no lone surrogate
(no UTF-8 encoding exists for it). :func:`json_problem`
says what is wrong, or ``None``; callers turn that into a 422, an ``invalid``
batch item or a skipped message. Pure: no I/O.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

MAX_DEPTH = 64  # levels of objects/arrays inside a value
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # what both stores hold in a 64-bit integer
DEFAULT_POOL_SIZE = 20  # PostgreSQL connections per process (SQLite: one writer)
INT32_MAX = 2**31 - 1  # integer columns (attempt, priority, weight)


def json_problem(value: Any, *, max_depth: int = MAX_DEPTH) -> str | None:
    """What makes ``value`` unstorable, or ``None``. Iterative: a hostile depth
    cannot exhaust the stack. (On every enqueue: plain text and integers are
    tested inline, by type identity.)"""
    stack: list[tuple[Any, int]] = [(value, 0)]
    pop = stack.pop
    while stack:
        node, depth = pop()
        kind = type(node)
        if kind is str:
            if "\x00" not in node and node.isascii():
                continue
            problem = text_problem(node)
        elif kind is int:
            if INT_MIN <= node <= INT_MAX:
                continue
            problem = _INT_RANGE
        elif kind is dict or kind is list:
            problem = _children(node, depth, max_depth, stack)
        else:
            problem = _other_problem(node, depth, max_depth, stack)
        if problem is not None:
            return problem
    return None


def _children(node: dict[Any, Any] | list[Any], depth: int, max_depth: int,
              stack: list[tuple[Any, int]]) -> str | None:
    """Push a container's items (one level deeper); what is wrong with its keys."""
    if depth >= max_depth:
        return f"nested deeper than {max_depth} levels"
    depth += 1
    push = stack.append
    if isinstance(node, list):
        for item in node:
            push((item, depth))
        return None
    for key, item in node.items():
        if type(key) is not str or "\x00" in key or not key.isascii():
            if not isinstance(key, str | int | float) and key is not None:
                return f"an object key of type {type(key).__name__} is not JSON"
            problem = text_problem(str(key))
            if problem is not None:
                return problem
        push((item, depth))
    return None


_INT_RANGE = "an integer is out of range (64-bit signed)"


def _other_problem(node: Any, depth: int, max_depth: int,
                   stack: list[tuple[Any, int]]) -> str | None:
    """Any node but plain text, a plain integer, a plain dict or list: a JSON scalar,
    a subclass of a JSON type, a tuple (an array, as ``json.dumps`` writes it), or
    something no JSON text holds (a set, bytes, a datetime, a UUID: what a plugin
    or a Python target may hand back)."""
    if isinstance(node, bool) or node is None:
        return None
    if isinstance(node, int):
        if not INT_MIN <= node <= INT_MAX:
            return _INT_RANGE
    elif isinstance(node, float):
        if not math.isfinite(node):
            return "numbers must be finite (no NaN, Infinity or 1e400)"
    elif isinstance(node, str):
        return text_problem(node)
    elif isinstance(node, dict):
        return _children(node, depth, max_depth, stack)
    elif isinstance(node, list | tuple):
        return _children(list(node), depth, max_depth, stack)
    else:
        return f"a value of type {type(node).__name__} is not JSON"
    return None


def text_problem(text: str) -> str | None:
    """What keeps ``text`` out of a store (a NUL, a lone surrogate), or None."""
    if "\x00" in text:
        return "NUL characters are not allowed"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "text must be valid Unicode (no lone surrogates)"
    return None


def checked(value: Any) -> Any:
    """``value`` itself if it is storable, else ``ValueError`` (for pydantic validators)."""
    problem = json_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def plugin_time(value: Any) -> datetime | None:
    """A time a plugin handed back (a retry's ``at``, a throttler's reschedule), as
    an aware UTC time: a naive one is taken as UTC, as the stores would take it.
    None if it is not a ``datetime`` or does not convert to UTC."""
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        return None

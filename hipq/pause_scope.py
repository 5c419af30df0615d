"""The stored form of a group pause's value (the partner's word, docs/throttling.md):
bounded, shown as stored, and exact.

A queue with ``backoff: {scope: group, field: ...}`` pauses the jobs whose field has
the throttled job's value. That value comes from a producer's job data and may be as
long as a body (a megabyte); it is kept in memory per held try, stored per pause,
shown on the queue's JSON and compared with every due job's. So a pause is keyed by
:func:`group_of` the value, never the value itself:

* a value of at most :data:`KEPT_CHARS` characters is its own group;
* a longer one is its first :data:`KEPT_CHARS` characters, ``…sha256:`` and the
  SHA-256 of the whole value in hex (:data:`MAX_CHARS` characters in all).

Exact: two different values never share a group. Two short ones differ as they are;
a short one and a long one differ in length (a long one's group is longer than any
short value); two long ones differ in their digest unless SHA-256 collides. The
engine, the waiting reason (:mod:`hipq.waiting`) and the held counts compare a job's
value through this one function. A row stored whole by an earlier version is read
cut in SQL and shown by :func:`shown_group`.

Pure: imports nothing beyond the standard library.
"""

from __future__ import annotations

import hashlib

KEPT_CHARS = 128  # a value this long or shorter is its own group; a longer one keeps these
_MARK = "…sha256:"
MAX_CHARS = KEPT_CHARS + len(_MARK) + 64  # the longest group (a digest is 64 hex digits)


def group_of(value: str) -> str:
    """The group a job's value at ``backoff.field`` belongs to (see the module)."""
    if len(value) <= KEPT_CHARS:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return value[:KEPT_CHARS] + _MARK + digest


def shown_group(group: str | None) -> str | None:
    """A stored group as the API shows it: as it is (at most :data:`MAX_CHARS`), or
    a longer one (a value stored whole before the bound) cut to its start and ``…``."""
    if group is None or len(group) <= MAX_CHARS:
        return group
    return group[:KEPT_CHARS] + "…"

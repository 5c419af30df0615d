"""``timestamptz`` values between asyncpg and Python, as asyncpg's own codec makes
them, with the values read recently kept: hipq stamps rows with the ``now`` of a
tick or of an enqueue, so the rows of one result share a few instants (a page of
2,000 due jobs enqueued in two batches holds eight distinct ones in its 8,000
timestamps). asyncpg builds a new ``datetime`` for each (a ``timedelta`` added to
its epoch, about 0.35 µs); a hit here costs a dictionary lookup. That was about
17% of the daemon's CPU when it ran a backlog in its tick.

The value read or written is exactly asyncpg's (``asyncpg/pgproto/codecs/
datetime.pyx``, binary format): microseconds since 2000-01-01 UTC as a signed 64-bit
integer; PostgreSQL's infinities are asyncpg's naive ``datetime.max`` and
``datetime.min`` both ways; a naive ``datetime`` is taken in local time and a
``date`` as local midnight; anything else is a ``TypeError``
(``tests/unit/test_pg_time.py`` compares both codecs on a real server).
"""

from __future__ import annotations

import struct
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # PostgreSQL's
CACHE_SIZE = 1024  # instants kept (cleared when full; about 150 KB at most)

# naive, as asyncpg's infinity_datetime and negative_infinity_datetime
_INFINITY = datetime.max  # noqa: DTZ901
_NEGATIVE_INFINITY = datetime.min  # noqa: DTZ901
_INFINITY_RAW = 0x7FFFFFFFFFFFFFFF
_NEGATIVE_INFINITY_RAW = -0x8000000000000000
# the microseconds since EPOCH of asyncpg's infinities, as its encoder computes them
# (a naive value taken as UTC by its arithmetic): written as PostgreSQL's infinities
_INFINITY_US = 252455615999999999
_NEGATIVE_INFINITY_US = -63082281600000000

_INT64 = struct.Struct("!q")
_pack, _unpack = _INT64.pack, _INT64.unpack
_ONE_US = timedelta(microseconds=1)
_read: dict[bytes, datetime] = {}


def decode(raw: bytes) -> datetime:
    """A ``timestamptz`` read in binary format."""
    value = _read.get(raw)
    if value is None:
        micros = _unpack(raw)[0]
        if micros == _INFINITY_RAW:
            return _INFINITY
        if micros == _NEGATIVE_INFINITY_RAW:
            return _NEGATIVE_INFINITY
        value = EPOCH + timedelta(microseconds=micros)
        if len(_read) >= CACHE_SIZE:
            _read.clear()
        _read[raw] = value
    return value


def encode(value: Any) -> bytes:
    """A ``timestamptz`` parameter in binary format."""
    if not isinstance(value, datetime):
        if not isinstance(value, date):
            raise TypeError(f"expected a datetime.date or datetime.datetime instance, "
                            f"got {type(value).__name__!r}")
        value = datetime(value.year, value.month, value.day, tzinfo=_local_timezone())
    if value == _INFINITY:
        return _pack(_INFINITY_RAW)
    if value == _NEGATIVE_INFINITY:
        return _pack(_NEGATIVE_INFINITY_RAW)
    micros = (value.astimezone(UTC) - EPOCH) // _ONE_US
    if micros == _INFINITY_US:
        return _pack(_INFINITY_RAW)
    if micros == _NEGATIVE_INFINITY_US:
        return _pack(_NEGATIVE_INFINITY_RAW)
    return _pack(micros)


def _local_timezone() -> timezone:
    offset = datetime.now(UTC).astimezone().utcoffset()
    return timezone(offset if offset is not None else timedelta(0))


async def install(conn: Any) -> None:
    """Use these on an asyncpg connection."""
    await conn.set_type_codec("timestamptz", encoder=encode, decoder=decode,
                              schema="pg_catalog", format="binary")

"""hipq.store.pg_time: the same ``timestamptz`` values as asyncpg's own codec, both
ways, on a real server: what one connection writes with it, the other reads the
same; what the server sends, both read as equal values with the same tzinfo."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipq.store import pg_time

pytestmark = pytest.mark.parametrize("backend", ["postgresql"], indirect=True)

# within what both PostgreSQL and Python's datetime hold
instants = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                        timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)),
                                                   timezone(-timedelta(hours=8))]))
naive = st.datetimes(min_value=datetime(1900, 1, 2), max_value=datetime(2200, 12, 30))
days = st.dates(min_value=date(1900, 1, 2), max_value=date(2200, 12, 30))
SPECIAL: list[Any] = [datetime.max, datetime.min, datetime(2000, 1, 1, tzinfo=UTC),
                      datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                      datetime(2026, 11, 28, 9, 30, 0, 123456, tzinfo=UTC)]


@pytest.fixture
async def pair(db_url: str) -> AsyncIterator[tuple[Any, Any]]:
    """(a connection with hipq's codec, one with asyncpg's own)."""
    url = db_url.replace("postgresql+asyncpg://", "postgresql://")
    ours, theirs = await asyncpg.connect(url), await asyncpg.connect(url)
    await pg_time.install(ours)
    try:
        yield ours, theirs
    finally:
        await ours.close()
        await theirs.close()


async def _same(pair: tuple[Any, Any], value: Any) -> None:
    ours, theirs = pair
    # written by each, read as text by the server: the same instant
    written = [await conn.fetchval("SELECT $1::timestamptz::text", value) for conn in pair]
    assert written[0] == written[1]
    # read by each: the same value, the same kind of value
    stored = await theirs.fetchval("SELECT $1::timestamptz", value)
    read = [await conn.fetchval("SELECT $1::text::timestamptz", written[0]) for conn in pair]
    assert read[0] == read[1] == stored
    assert read[0].tzinfo == read[1].tzinfo
    # twice (the second from what was kept), and as array elements
    assert await ours.fetchval("SELECT $1::text::timestamptz", written[0]) == stored
    assert (await ours.fetchval("SELECT ARRAY[$1::timestamptz, NULL]", value)
            == await theirs.fetchval("SELECT ARRAY[$1::timestamptz, NULL]", value))
    assert (await ours.fetchval("SELECT cardinality($1::timestamptz[])", [value, value]) == 2)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=instants | naive | days)
async def test_a_time_is_written_and_read_as_asyncpg_does(
        pair: tuple[Any, Any], value: Any) -> None:
    await _same(pair, value)


@pytest.mark.parametrize("value", SPECIAL, ids=str)
async def test_the_infinities_and_the_epoch(pair: tuple[Any, Any], value: Any) -> None:
    await _same(pair, value)
    ours, _ = pair
    for text, expected in (("infinity", datetime.max), ("-infinity", datetime.min)):
        assert await ours.fetchval(f"SELECT '{text}'::timestamptz") == expected


async def test_what_is_not_a_time_is_refused_as_asyncpg_refuses_it(
        pair: tuple[Any, Any]) -> None:
    for conn in pair:
        with pytest.raises((TypeError, asyncpg.DataError), match="datetime"):
            await conn.fetchval("SELECT $1::timestamptz", "2026-11-28")


async def test_rows_of_one_instant_share_one_value(pair: tuple[Any, Any]) -> None:
    ours, _ = pair
    rows = await ours.fetch("SELECT now() AS at FROM generate_series(1, 100)")
    assert len({id(r["at"]) for r in rows}) == 1
    pg_time._read.clear()
    many = await ours.fetch("SELECT now() + g * interval '1 second' AS at "
                            "FROM generate_series(1, $1::int) AS g", pg_time.CACHE_SIZE * 2)
    assert len(pg_time._read) <= pg_time.CACHE_SIZE  # bounded
    assert [r["at"] for r in many] == sorted({r["at"] for r in many})

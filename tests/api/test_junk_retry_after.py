"""A ``Retry-After`` that is no time is ignored without spending an attempt (issue 48,
"Who may pause"; docs/throttling.md, "Who may pause, and for how long"): a real
partner on 127.0.0.1 answers 429 (or 503) with the value as raw bytes (full-width
digits, an exponent, a sign, NaN, bytes that are no UTF-8...); the try ends
``throttled``, given back (attempt 0, not a transport or HTTP failure), its scope
paused for ``backoff.initial_seconds`` (the doubling), and once that passes the job
runs and succeeds on its first attempt. SQLite and PostgreSQL, the clock fake. The
queue keeps the doubling (``backoff.learn: false``) so the pause shows that no time
was taken; by default a refusal with no time teaches the queue its rate instead
(``tests/engine/test_learned_rate.py``). (``tests/api/test_who_pauses.py`` covers
more values on a 429.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from hipq.testing import FakeClock
from tests.api.conftest import PRODUCER, Api, LiveFactory
from tests.api.test_who_pauses import RawPartner

JUNK = [
    pytest.param("\uff13\uff10".encode(), id="fullwidth-30"),
    pytest.param("\uff11\uff12\uff10".encode(), id="fullwidth-120"),
    pytest.param(b"1e9", id="exponent"),
    pytest.param(b"-5", id="negative"),
    pytest.param(b"NaN", id="NaN"),
    pytest.param(b"Infinity", id="Infinity"),
    pytest.param(b"30.5", id="decimal"),
    pytest.param(b"30s", id="unit"),
    pytest.param(b"3 0", id="space"),
    pytest.param(b"\xff\xfe", id="not-utf8"),
    pytest.param(b"30\x80", id="digits-then-a-stray-byte"),
    pytest.param("\u0663\u0660".encode(), id="arabic-indic-30"),
    pytest.param("Wed, \uff12\uff11 Oct 2015 07:28:00 GMT".encode(), id="fullwidth-date"),
    pytest.param(b"Wed, 99 Foo 2015 99:99:99 GMT", id="bad-date"),
    pytest.param(b"", id="empty"),
    pytest.param(b"x" * 6000, id="long"),
]
# Not here: a value with NUL, another control character or a folded line makes the
# whole answer malformed to llhttp (a transport failure, as RFC 9112 lets a client
# treat it); obs-text bytes (0x80-0xff) are taken and ignored, as above.


@pytest.fixture
async def partner() -> AsyncIterator[RawPartner]:
    raw = RawPartner()
    server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
    raw.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield raw
    server.close()
    await server.wait_closed()


def _queue(url: str) -> dict[str, Any]:
    return {"id": "q", "attempts": 3,
            "target": {"kind": "http", "url": url + "/{queue}/{id}", "mode": "sync",
                       "timeout_seconds": 5},
            "retry": {"strategy": "fixed", "delay_seconds": 600},
            "backoff": {"initial_seconds": 2, "max_seconds": 60, "learn": False}}


async def _pauses(api: Api) -> list[dict[str, Any]]:
    status, body = await api.call("GET", "/v1/jobs/q")
    assert status == 200, body
    return body["backoff"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("status", [b"429 Too Many Requests", b"503 Service Unavailable"])
@pytest.mark.parametrize("value", JUNK)
async def test_a_junk_retry_after_is_no_time_and_spends_no_attempt(
        live: LiveFactory, partner: RawPartner, value: bytes, status: bytes) -> None:
    partner.status = status
    partner.lines = b"Retry-After: " + value + b"\r\n"
    clock = FakeClock()
    lv = await live(clock=clock)
    api = lv.api
    assert (await api.call("POST", "/v1/jobs", _queue(partner.url)))[0] == 201
    start = clock.now()
    assert (await api.call("PUT", "/v1/jobs/q/j", {}, token=PRODUCER))[0] == 201
    job = await api.wait_job("q", "j", "queued", check=lambda j: len(j["history"]) == 1)

    assert job["attempt"] == 0  # given back, not spent
    [tried] = job["history"]
    assert tried["outcome"] == "throttled"  # not a transport or HTTP status failure
    assert tried["error"]["kind"] == "throttled"
    assert "retry_after" not in tried["error"]["data"]  # the value is no time
    assert datetime.fromisoformat(job["run_at"]) == start + timedelta(seconds=2)
    deadline = asyncio.get_running_loop().time() + 10
    while not (pauses := await _pauses(api)):  # written by the owner's next step
        assert asyncio.get_running_loop().time() < deadline, "no pause"
        await asyncio.sleep(0.02)  # polling the API; there is no event to wait on
    [pause] = pauses
    assert datetime.fromisoformat(pause["until"]) == start + timedelta(seconds=2)

    # the doubling's pause passes: the partner takes it, on the job's first attempt
    partner.status, partner.lines = b"200 OK", b""
    clock.advance(2)
    lv.daemon.wake()
    done = await api.wait_job("q", "j", "succeeded")
    assert done["attempt"] == 1
    assert [t["outcome"] for t in done["history"]] == ["throttled", "succeeded"]
    assert partner.hits == 2

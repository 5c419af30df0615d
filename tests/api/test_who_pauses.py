"""Who may pause a scope, and for how long (issue 46, findings 3 and 12a;
docs/throttling.md, "Who may pause, and for how long"): a live daemon on real
sockets, real partners on 127.0.0.1, SQLite and PostgreSQL, the clock fake.

* A producer's ``throttled`` status (``POST /v1/jobs/{queue}/{id}`` with its token)
  gives its try back and pauses nothing; the same answer on the try's signed
  callback URL (the partner) still pauses.
* A partner's ``Retry-After: 999999999`` pauses at most
  ``backoff.max_partner_seconds`` (default 3600), as configured.
* A ``Retry-After`` or reset that is not clean ASCII digits (or an ASCII HTTP date)
  is no time: the try is still a throttled try given back (no attempt spent, not a
  transport failure), its scope paused by the doubling. The value ``\\xb2``
  (superscript two, which ``str.isdigit`` accepts and ``int`` refuses) is sent as
  the raw byte it is.
* ``backoff.max_partner_seconds`` is checked (a positive number) and shown on the
  queue JSON and in ``/openapi.json``."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from hipq.testing import FakeClock
from tests.api.conftest import PRODUCER, Api, Downstream, Live, LiveFactory, http_queue

DAY = 86400


class RawPartner:
    """A partner that answers every request with 429 and the header lines the test
    sets, written as raw bytes (aiohttp would encode a str header as UTF-8)."""

    def __init__(self) -> None:
        self.url = ""
        self.lines = b""
        self.status = b"429 Too Many Requests"
        self.hits = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                await reader.readexactly(int(length[1]) if length else 0)
                self.hits += 1
                writer.write(b"HTTP/1.1 " + self.status + b"\r\n" + self.lines
                             + b"Content-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def raw_partner() -> AsyncIterator[RawPartner]:
    partner = RawPartner()
    server = await asyncio.start_server(partner.handle, "127.0.0.1", 0)
    partner.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield partner
    server.close()
    await server.wait_closed()


NO_LEARNING = {"learn": False}  # a refusal with no time pauses for the doubling's time


def _sync_queue(url: str, **extra: Any) -> dict[str, Any]:
    return {"id": "q", "attempts": 3,
            "target": {"kind": "http", "url": url + "/{queue}/{id}", "mode": "sync",
                       "timeout_seconds": 5},
            "retry": {"strategy": "fixed", "delay_seconds": 1}, **extra}


async def _pauses(api: Api, queue: str = "q") -> list[dict[str, Any]]:
    status, body = await api.call("GET", f"/v1/jobs/{queue}")
    assert status == 200, body
    return body["backoff"]  # type: ignore[no-any-return]


async def _throttled_once(live: LiveFactory, body: dict[str, Any]) -> tuple[Live, FakeClock]:
    """A daemon on a fake clock, the queue ``body``, job ``j`` launched and given back."""
    clock = FakeClock()
    lv = await live(clock=clock)
    api = lv.api
    assert (await api.call("POST", "/v1/jobs", body))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/q/j", {}, token=PRODUCER))[0] == 201
    lv.daemon.wake()
    await api.wait_job("q", "j", "queued", check=lambda j: len(j["history"]) == 1)
    return lv, clock


def _until(pause: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(pause["until"])


async def _pause(api: Api) -> dict[str, Any]:
    """The queue's one pause, once the owner wrote it (its tick persists the try's
    end, then the pauses): polled, bounded."""
    deadline = asyncio.get_running_loop().time() + 10
    while not (pauses := await _pauses(api)):
        assert asyncio.get_running_loop().time() < deadline, "no pause"
        await asyncio.sleep(0.02)  # polling the API; there is no event to wait on
    [pause] = pauses
    return pause


# -- the producer's status route pauses nothing ------------------------------------------


@pytest.mark.parametrize("scope", ["queue", "group"])
async def test_a_producer_tokens_throttled_status_pauses_nothing(
        live: LiveFactory, downstream: Downstream, scope: str) -> None:
    """The finding as reported, over HTTP: the producer's own running job, a day's
    ``retry_after_seconds``. The try is given back (no attempt spent), nothing is
    paused, and the next job (the victim tenant's, in group scope) launches at once."""
    clock = FakeClock()
    api = (await live(clock=clock)).api
    backoff = {"scope": "group", "field": "tenant"} if scope == "group" else {}
    assert (await api.call("POST", "/v1/jobs", http_queue("q", downstream.url,
                                                          backoff=backoff)))[0] == 201
    victim = {"data": {"tenant": "victim"}}
    assert (await api.call("PUT", "/v1/jobs/q/mine", victim, token=PRODUCER))[0] == 201
    await api.wait_job("q", "mine", "running")
    status, body = await api.call("POST", "/v1/jobs/q/mine",
                                  {"status": "throttled", "attempt": 1,
                                   "retry_after_seconds": DAY}, token=PRODUCER)
    assert status == 202, body
    job = await api.wait_job("q", "mine", "queued", check=lambda j: len(j["history"]) == 1)
    assert job["attempt"] == 0
    assert job["history"][0]["outcome"] == "throttled"
    assert datetime.fromisoformat(job["run_at"]) <= clock.now() + timedelta(seconds=3600)
    assert (await api.call("PUT", "/v1/jobs/q/theirs", victim, token=PRODUCER))[0] == 201
    await api.wait_job("q", "theirs", "running")
    assert await _pauses(api) == []  # written, if at all, before "theirs" launched


async def test_a_signed_callbacks_throttled_answer_still_pauses(
        live: LiveFactory, downstream: Downstream) -> None:
    clock = FakeClock()
    api = (await live(clock=clock)).api
    assert (await api.call("POST", "/v1/jobs", http_queue("q", downstream.url)))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/q/j", {}))[0] == 201
    launch = (await downstream.wait_for(1))[0]
    status, body = await api.call("POST", launch["callback_url"],
                                  {"status": "throttled", "retry_after_seconds": 30},
                                  token=None)
    assert status == 202, body
    await api.wait_job("q", "j", "queued", check=lambda j: len(j["history"]) == 1)
    pause = await _pause(api)
    assert _until(pause) == clock.now() + timedelta(seconds=30)


async def test_a_signed_callbacks_huge_time_is_taken_and_capped(
        live: LiveFactory, downstream: Downstream) -> None:
    """Not refused with 422 (the try would then time out and spend an attempt)."""
    clock = FakeClock()
    api = (await live(clock=clock)).api
    assert (await api.call("POST", "/v1/jobs", http_queue("q", downstream.url)))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/q/j", {}))[0] == 201
    launch = (await downstream.wait_for(1))[0]
    status, body = await api.call("POST", launch["callback_url"],
                                  {"status": "throttled", "retry_after_seconds": 999999999},
                                  token=None)
    assert status == 202, body
    job = await api.wait_job("q", "j", "queued", check=lambda j: len(j["history"]) == 1)
    assert job["attempt"] == 0
    pause = await _pause(api)
    assert _until(pause) == clock.now() + timedelta(seconds=3600)


# -- the partner's time, capped ------------------------------------------------------------


@pytest.mark.parametrize(("backoff", "seconds"), [
    ({}, 3600), ({"max_partner_seconds": 2 * DAY}, 2 * DAY), ({"max_partner_seconds": 90}, 90)])
async def test_a_retry_after_of_999999999_pauses_at_most_max_partner_seconds(
        live: LiveFactory, raw_partner: RawPartner, backoff: dict[str, Any],
        seconds: int) -> None:
    raw_partner.lines = b"Retry-After: 999999999\r\n"
    lv, clock = await _throttled_once(live, _sync_queue(raw_partner.url, backoff=backoff))
    job = await lv.api.job("q", "j")
    assert job["attempt"] == 0
    pause = await _pause(lv.api)
    assert _until(pause) == clock.now() + timedelta(seconds=seconds)
    assert datetime.fromisoformat(job["run_at"]) == clock.now() + timedelta(seconds=seconds)


@pytest.mark.parametrize("value", [
    b"\xb2", b"\xb2\xb3", b"1e3", b"-5", "\u0663".encode(), b"\xd9\xa3", b"+5", b"nan",
    b"0x10", b"4.5", "Wed, \u0662\u0661 Oct 2015 07:28:00 GMT".encode()])
async def test_a_junk_retry_after_spends_no_attempt_and_the_doubling_applies(
        live: LiveFactory, raw_partner: RawPartner, value: bytes) -> None:
    raw_partner.lines = b"Retry-After: " + value + b"\r\n"  # the doubling, to see no time
    lv, clock = await _throttled_once(live, _sync_queue(raw_partner.url, backoff=NO_LEARNING))
    job = await lv.api.job("q", "j")
    assert job["attempt"] == 0
    assert job["history"][0]["outcome"] == "throttled"  # not a transport failure
    assert "retry_after" not in job["history"][0]["error"]["data"]
    pause = await _pause(lv.api)
    assert _until(pause) == clock.now() + timedelta(seconds=1)  # backoff.initial_seconds


@pytest.mark.parametrize("header", [b"RateLimit-Reset", b"X-RateLimit-Reset"])
@pytest.mark.parametrize("value", [b"\xb2", b"1e3", "\u0663".encode(), b"-5", b"1_000"])
async def test_a_junk_reset_on_a_429_is_no_time(live: LiveFactory, raw_partner: RawPartner,
                                                header: bytes, value: bytes) -> None:
    raw_partner.lines = header + b": " + value + b"\r\n"
    lv, clock = await _throttled_once(live, _sync_queue(raw_partner.url, backoff=NO_LEARNING))
    assert (await lv.api.job("q", "j"))["attempt"] == 0
    pause = await _pause(lv.api)
    assert _until(pause) == clock.now() + timedelta(seconds=1)


@pytest.mark.parametrize("lines", [b"Retry-After: " + b"9" * 40 + b"\r\n",
                                   b"Retry-After: " + b"1" * 5000 + b"\r\n",
                                   b"X-RateLimit-Reset: " + b"9" * 40 + b"\r\n",
                                   b"RateLimit-Reset: 31000000\r\n"])
async def test_a_huge_clean_time_spends_no_attempt_and_is_capped(
        live: LiveFactory, raw_partner: RawPartner, lines: bytes) -> None:
    raw_partner.lines = lines
    lv, clock = await _throttled_once(live, _sync_queue(raw_partner.url))
    assert (await lv.api.job("q", "j"))["attempt"] == 0
    pause = await _pause(lv.api)
    assert _until(pause) == clock.now() + timedelta(seconds=3600)


async def test_a_spent_budget_with_a_far_reset_is_capped(live: LiveFactory,
                                                         raw_partner: RawPartner) -> None:
    """A success that says the budget is spent until almost a year from now."""
    raw_partner.status = b"200 OK"
    raw_partner.lines = b"RateLimit-Remaining: 0\r\nRateLimit-Reset: 31000000\r\n"
    clock = FakeClock()
    lv = await live(clock=clock)
    assert (await lv.api.call("POST", "/v1/jobs", _sync_queue(raw_partner.url)))[0] == 201
    assert (await lv.api.call("PUT", "/v1/jobs/q/j", {}))[0] == 201
    lv.daemon.wake()
    await lv.api.wait_job("q", "j", "succeeded")
    assert _until(await _pause(lv.api)) == clock.now() + timedelta(seconds=3600)


# -- the setting ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, "3600", True, None, 1e300, "x"])
async def test_max_partner_seconds_must_be_a_positive_number(live: LiveFactory,
                                                             value: Any) -> None:
    api = (await live()).api
    status, body = await api.call("POST", "/v1/jobs",
                                  {"id": "q", "backoff": {"max_partner_seconds": value}})
    assert status == 422, body
    assert (await api.call("GET", "/v1/jobs/q"))[0] == 404


async def test_max_partner_seconds_is_shown_on_the_queue_and_in_openapi(
        live: LiveFactory) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", {"id": "plain"}))[0] == 201
    assert (await api.call("POST", "/v1/jobs", {
        "id": "daily", "backoff": {"max_partner_seconds": DAY}}))[0] == 201
    plain = (await api.call("GET", "/v1/jobs/plain"))[1]
    daily = (await api.call("GET", "/v1/jobs/daily"))[1]
    assert plain["config"]["backoff"]["max_partner_seconds"] == 3600
    assert daily["config"]["backoff"]["max_partner_seconds"] == DAY
    document = (await api.call("GET", "/openapi.json"))[1]
    schemas = document["components"]["schemas"]
    given = schemas["Backoff-Input"]["properties"]["max_partner_seconds"]
    assert (given["type"], given["default"], given["exclusiveMinimum"]) == ("number", 3600, 0)
    assert schemas["Backoff-Output"]["properties"]["max_partner_seconds"]["type"] == "number"

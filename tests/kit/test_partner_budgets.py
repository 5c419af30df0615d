"""The test partner's budgets (hipq.downstream.partner, docs/throttling.md):
several windows per key in requests and in cost, fixed or token-bucket; cost
admitted by its estimate and charged at its actual; usage in sync answers and
callbacks; every header family, read back with hipq.partners.headers, gives the
buckets the partner holds; keys apart; stats per bucket. The books
(hipq.downstream.partner_ledger) alone with given times, the app in-process on
127.0.0.1 under a FakeClock, and one real process for the command line."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from hipq.downstream.partner import Contract, Partner, PartnerProcess, parse_args
from hipq.downstream.partner_buckets import Limit, Shape
from hipq.downstream.partner_headers import go_duration, rfc3339
from hipq.downstream.partner_ledger import Admission, Ledger, Refusal
from hipq.partners import headers as reader
from hipq.testing import FakeClock

Serve = Callable[[web.Application], Awaitable[str]]
SHAPES: list[Shape] = ["fixed", "token-bucket"]


def limits(*texts: str) -> tuple[Limit, ...]:
    return tuple(Limit.parse(text) for text in texts)


def used(ledger: Ledger, key: str, now: float) -> dict[str, float]:
    """What each bucket of ``key`` holds (above its limit when overdrawn)."""
    return {b.limit.name: b.used(now) for b in ledger.keys[key].buckets}


# -- the books, with given times ------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
def test_several_windows_refuse_at_the_tightest(shape: Shape) -> None:
    ledger = Ledger(limits("requests:3/1", "requests:5/60"), shape)
    now = 100.0
    for _ in range(3):
        assert isinstance(ledger.admit("a", 1, now), Admission)
    refused = ledger.admit("a", 1, now)
    assert refused == Refusal("rate", ("requests-1s",), 1)
    now += 1.0  # the 1 s bucket has room again; the minute's has 2 left
    assert isinstance(ledger.admit("a", 1, now), Admission)
    assert isinstance(ledger.admit("a", 1, now), Admission)
    refused = ledger.admit("a", 1, now)
    assert isinstance(refused, Refusal)
    assert refused.buckets == ("requests-60s",)
    # fixed: the minute's window opened at 100, so 59 s left; the token bucket of 5 a
    # minute (one back every 12 s) lacks 11/12 of a request: 11 s
    assert refused.auto_retry_after == (59 if shape == "fixed" else 11)
    stats = ledger.stats_json()["keys"]["a"]
    assert (stats["accepted"], stats["refused"]) == (5, 2)
    assert stats["buckets"]["requests-1s"]["refused"] == 1
    assert stats["buckets"]["requests-60s"]["refused"] == 1
    assert isinstance(ledger.admit("b", 1, now), Admission)  # another key, its own buckets


def test_a_fixed_window_opens_at_the_first_launch_and_a_token_bucket_refills() -> None:
    fixed = Ledger(limits("requests:2/10"), "fixed")
    assert fixed.views("a", 0.0)[0].reset_in == 0  # no window open
    fixed.admit("a", 1, 5.0)
    fixed.admit("a", 1, 9.0)
    late = fixed.views("a", 14.9)[0]
    assert late.remaining == 0
    assert late.reset_in == pytest.approx(0.1)
    assert isinstance(fixed.admit("a", 1, 14.9), Refusal)
    assert isinstance(fixed.admit("a", 1, 15.0), Admission)  # the next window
    bucket = Ledger(limits("cost:100/10"), "token-bucket")
    bucket.admit("a", 100, 0.0)
    view = bucket.views("a", 2.5)[0]
    assert view.remaining == pytest.approx(25)
    assert (view.reset_in, view.refills) == (7.5, True)
    assert isinstance(bucket.admit("a", 30, 2.5), Refusal)
    assert isinstance(bucket.admit("a", 30, 3.0), Admission)


@pytest.mark.parametrize("shape", SHAPES)
def test_cost_is_admitted_by_its_estimate_and_charged_at_its_actual(shape: Shape) -> None:
    ledger = Ledger(limits("cost:100/60", "requests:10/60"), shape)
    first = ledger.admit("a", 60, 0.0)
    assert isinstance(first, Admission)
    refused = ledger.admit("a", 50, 0.0)  # 60 + 50 > 100: by the estimate
    # fixed: when the window ends; the token bucket: 10 more at 100 a minute
    assert refused == Refusal("cost", ("cost-60s",), 60 if shape == "fixed" else 6)
    ledger.settle(first, 20, 0.0)  # it used 20: 80 free
    assert used(ledger, "a", 0.0) == {"cost-60s": 20, "requests-60s": 1}
    second = ledger.admit("a", 50, 0.0)
    assert isinstance(second, Admission)
    ledger.settle(second, 95, 0.0)  # used more than it said: the bucket is overdrawn
    assert used(ledger, "a", 0.0)["cost-60s"] == 115
    assert isinstance(ledger.admit("a", 0, 0.0), Refusal)  # nothing fits, not even 0
    for admission in (first, second):
        ledger.release(admission)
        ledger.release(admission)  # once only
    assert ledger.in_flight == 0
    stats = ledger.stats_json()["keys"]["a"]
    assert stats["cost"] == 115
    assert stats["buckets"]["cost-60s"] == {
        "unit": "cost", "limit": 100, "per_seconds": 60, "accepted": 2, "refused": 2,
        "cost": 115, "max_used": 115}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_launch_larger_than_a_bucket_goes_alone_when_it_is_untouched(shape: Shape) -> None:
    ledger = Ledger(limits("cost:100/10"), shape)
    small = ledger.admit("a", 1, 0.0)
    assert isinstance(small, Admission)
    refused = ledger.admit("a", 250, 0.0)
    assert isinstance(refused, Refusal)
    assert refused.auto_retry_after == (10 if shape == "fixed" else 1)  # empty again then
    later = 10.0 if shape == "fixed" else 0.1
    assert isinstance(ledger.admit("a", 250, later), Admission)
    assert isinstance(ledger.admit("a", 1, later), Refusal)  # it is alone


def test_concurrency_is_per_key_and_checked_after_the_buckets() -> None:
    ledger = Ledger(limits("requests:2/60"), "fixed", concurrency=1)
    first = ledger.admit("a", 1, 0.0)
    assert isinstance(first, Admission)
    assert ledger.admit("a", 1, 0.0) == Refusal("concurrency", (), 1)
    assert isinstance(ledger.admit("b", 1, 0.0), Admission)
    ledger.release(first)
    assert isinstance(ledger.admit("a", 1, 0.0), Admission)
    assert ledger.admit("a", 1, 0.0) == Refusal("rate", ("requests-60s",), 60)
    assert used(ledger, "a", 0.0) == {"requests-60s": 2}  # the refusals took nothing


# each step: (key, estimate, seconds to wait first, whether an open launch ends first,
# its usage factor)
Step = tuple[str, float, float, bool, float]
steps = st.lists(st.tuples(st.sampled_from("ab"), st.floats(0, 40), st.floats(0, 3),
                           st.booleans(), st.floats(0, 1)), max_size=120)


@settings(max_examples=150, deadline=None)
@given(steps=steps, shape=st.sampled_from(SHAPES), high=st.sampled_from([1.0, 1.5]))
def test_no_bucket_ever_holds_more_than_its_limit(steps: list[Step], shape: Shape,
                                                  high: float) -> None:
    """Whatever arrives when, each bucket's most ever used stays within its limit
    while launches cost at most their estimate. When they may cost more (``high``),
    a fixed window holds at most ``high`` times its limit (what it admitted grew by
    at most that), a token bucket at most its limit plus what the launches in
    progress may add (it refilled while they ran). A refusal takes nothing."""
    bounds = limits("requests:5/2", "requests:12/10", "cost:40/3", "cost:100/20")
    concurrency = 4
    ledger = Ledger(bounds, shape, concurrency=concurrency)
    now, open_launches = 1000.0, list[Admission]()
    for key, estimate, wait, end_one, share in steps:
        now += wait
        if end_one and open_launches:
            admission = open_launches.pop(0)
            ledger.settle(admission, admission.estimate * share * high, now)
            ledger.release(admission)
        before = used(ledger, key, now)
        admitted = ledger.admit(key, estimate, now)
        if isinstance(admitted, Admission):
            open_launches.append(admitted)
        else:
            assert used(ledger, key, now) == before
    for count in ledger.stats.keys.values():
        for limit in bounds:
            most = count.buckets[limit.name].max_used if limit.name in count.buckets else 0
            bound = limit.amount
            if limit.unit == "cost" and shape == "fixed":
                bound *= high
            elif limit.unit == "cost":
                bound += (high - 1) * concurrency * 40
            assert most <= bound + 1e-6
    assert ledger.stats.accepted + ledger.stats.refused == len(steps)


# -- headers, as written --------------------------------------------------------------


def test_go_durations_and_rfc3339_times_as_the_vendors_write_them() -> None:
    cases = {0: "0s", 0.0001: "1ms", 0.02: "20ms", 1.5: "1.5s", 60: "1m0s", 360: "6m0s",
             3723.25: "1h2m3.25s", 59.999: "59.999s", 59.9994: "1m0s"}
    for seconds, text in cases.items():
        assert go_duration(seconds) == text
        parsed = reader.go_duration(text)
        assert parsed is not None
        assert seconds <= parsed + 1e-9 <= seconds + 0.001 + 1e-9
    clock = FakeClock()
    assert rfc3339(clock.now()) == "2026-01-05T12:00:00Z"
    assert rfc3339(clock.now() + timedelta(milliseconds=1)) == "2026-01-05T12:00:01Z"


# -- the app in-process, under a FakeClock --------------------------------------------

Launch = Callable[..., Awaitable[tuple[int, dict[str, str], Any]]]


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def start(serve: Serve, http: aiohttp.ClientSession,
          clock: FakeClock) -> Callable[..., Awaitable[tuple[Partner, Launch]]]:
    """A partner on 127.0.0.1 under ``clock`` with a contract of the command line's
    options: -> (the partner, ``launch(key, max_tokens=None, callback_url=None)``)."""

    async def start(*args: str) -> tuple[Partner, Launch]:
        contract = parse_args(["--latency", "0", *args])[0]
        partner = Partner(contract, clock)
        url = await serve(partner.app())

        async def launch(key: str, max_tokens: float | None = None,
                         callback_url: str | None = None) -> tuple[int, dict[str, str], Any]:
            data: dict[str, Any] = {"api_key": key}
            if max_tokens is not None:
                data["max_tokens"] = max_tokens
            body = {"id": "j", "queue": "q", "data": data, "attempt": 1, "max_attempts": 3,
                    "correlation_key": "ck", "callback_url": callback_url}
            async with http.post(f"{url}/v1/chat", json=body) as response:
                return response.status, dict(response.headers), await response.json()

        return partner, launch

    return start


USAGE = ("--cost-field", "data.max_tokens", "--usage-factor", "0.2-0.9", "--seed", "7",
         "--usage-header", "x-usage-tokens")


async def test_sync_answers_report_usage_and_the_bucket_is_charged_it(
        start: Callable[..., Awaitable[tuple[Partner, Launch]]], clock: FakeClock) -> None:
    partner, launch = await start("--limit", "cost:1400/60", "--limit", "requests:100/60",
                                  *USAGE)
    reported = []
    for tokens in (500, 500, 500):  # 1500 by estimate: fits as each is settled lower
        status, headers, body = await launch("a", tokens)
        assert status == 200
        cost = body["usage"]["cost"]
        assert body == {"ok": True, "usage": {"cost": cost}}
        assert isinstance(cost, int)
        assert 0.2 * tokens - 1 <= cost <= 0.9 * tokens + 1
        assert headers["x-usage-tokens"] == str(cost)
        reported.append(cost)
    assert used(partner.ledger, "a", clock.monotonic())["cost-60s"] == sum(reported)
    stats = partner.ledger.stats_json()["keys"]["a"]
    assert stats["cost"] == sum(reported)
    assert stats["buckets"]["cost-60s"]["max_used"] <= 1400
    again = Partner(partner.contract, FakeClock())  # --seed: the same draws
    assert [again.actual_cost(t) for t in (500, 500, 500)] == reported
    status, _, body = await launch("a")  # no max_tokens: --cost-default 1
    assert (status, body["usage"]["cost"] in (0, 1)) == (200, True)


async def test_no_usage_when_the_partner_counts_no_cost(
        start: Callable[..., Awaitable[tuple[Partner, Launch]]]) -> None:
    _, launch = await start("--rate", "5")
    status, headers, body = await launch("a", 300)
    assert (status, body) == (200, {"ok": True})
    assert not any(name.lower().startswith("x-usage") for name in headers)


async def test_callbacks_report_usage(start: Callable[..., Awaitable[tuple[Partner, Launch]]],
                                      serve: Serve) -> None:
    received: asyncio.Queue[tuple[dict[str, Any], str | None]] = asyncio.Queue()

    async def callback(request: web.Request) -> web.Response:
        await received.put((json.loads(await request.text()),
                             request.headers.get("x-usage-tokens")))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/callback", callback)
    receiver = await serve(app)
    partner, launch = await start("--mode", "callback", "--limit", "cost:100/60", *USAGE)
    assert (await launch("a", 80, f"{receiver}/callback"))[0] == 202
    body, header = await asyncio.wait_for(received.get(), 5)
    cost = body["usage"]["cost"]
    assert body == {"status": "succeeded", "result": {"ok": True}, "usage": {"cost": cost}}
    assert (16 <= cost <= 72, header) == (True, str(cost))
    await asyncio.wait_for(asyncio.gather(*partner.tasks), 5)  # ends after its post
    assert partner.ledger.in_flight == 0
    assert partner.ledger.stats_json()["keys"]["a"]["buckets"]["cost-60s"]["cost"] == cost


FAMILY_LIMITS = ("--limit", "requests:5/10", "--limit", "requests:1000/86400",
                 "--limit", "cost:200/60", "--limit", "cost:5000/3600",
                 "--cost-field", "data.max_tokens")
READ_AS = {"ietf": "ietf", "ietf-older": "ietf", "x-ratelimit": "x-ratelimit",
           "openai": "openai", "anthropic": "anthropic"}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("family", list(READ_AS))
async def test_each_header_family_reads_back_as_the_buckets_the_partner_holds(
        start: Callable[..., Awaitable[tuple[Partner, Launch]]], clock: FakeClock,
        family: str, shape: Shape) -> None:
    partner, launch = await start("--headers", family, "--window", shape,
                                  "--retry-after", "auto", *FAMILY_LIMITS)
    answers = []
    for tokens in (50, 120, 10, 90):  # the fourth lacks cost room: refused
        answers.append(await launch("a", tokens))
        report = reader.read(answers[-1][1], clock.now(), max_seconds=86400 * 2)
        assert report.family == READ_AS[family]
        _assert_holds(report, partner.ledger.views("a", clock.monotonic()), family, clock)
        clock.advance(1.3)
    assert [status for status, _, _ in answers] == [200, 200, 200, 429]
    assert answers[3][2]["buckets"] == ["cost-60s"]
    _, other, _ = await launch("b", 10)  # key a's spending is not key b's
    report = reader.read(other, clock.now(), max_seconds=86400 * 2)
    assert all(b.limit is not None and b.remaining >= b.limit - 10 for b in report.buckets)


def _assert_holds(report: reader.PartnerReport, views: list[Any], family: str,
                  clock: FakeClock) -> None:
    by_name = {v.name: v for v in views}
    if family == "ietf":
        expected = list(by_name)
    else:  # the tightest of each unit it describes
        units = ("requests",) if family in ("ietf-older", "x-ratelimit") else (
            "requests", "cost")
        expected = [min((v for v in views if v.unit == unit),
                        key=lambda v: (v.remaining, -v.reset_in)).name for unit in units]
    assert len(report.buckets) == len(expected)
    for got, name in zip(report.buckets, expected, strict=True):
        view = by_name[name]
        assert got.unit == view.unit
        assert got.remaining == math.floor(view.remaining + 1e-9)
        assert got.limit == view.limit
        truth = clock.now() + timedelta(seconds=view.reset_in)
        assert truth <= got.reset_at <= truth + timedelta(seconds=1)
        if family == "ietf":
            assert (got.name, got.window_seconds) == (name, view.per_seconds)
        if family in ("openai", "anthropic"):
            assert got.name == ("requests" if view.unit == "requests" else "tokens")


async def test_the_older_aliases_still_write_what_they_wrote(
        start: Callable[..., Awaitable[tuple[Partner, Launch]]]) -> None:
    partner, launch = await start("--rate", "2", "--per-seconds", "3", "--ratelimit-headers",
                                  "--x-ratelimit-headers", "--headers", "none")
    assert partner.contract.headers == ("ietf-older", "x-ratelimit")
    _, headers, _ = await launch("a")
    for prefix in ("RateLimit", "X-RateLimit"):
        assert (headers[f"{prefix}-Limit"], headers[f"{prefix}-Remaining"],
                headers[f"{prefix}-Reset"]) == ("2", "1", "3")
    assert "RateLimit-Policy" not in headers


def test_the_command_line() -> None:
    contract = parse_args(["--rate", "10", "--per-seconds", "2", "--limit", "cost:2.5/1"])[0]
    assert contract.limits == (Limit("cost", 2.5, 1), Limit("requests", 10, 2))
    assert contract.counts_cost
    assert contract == Contract(limits=contract.limits)  # the rest as the defaults
    assert not Contract(limits=limits("requests:1/1")).counts_cost
    assert parse_args(["--usage-factor", "0.8"])[0].usage_factor == (0.8, 0.8)
    for bad in (["--limit", "tokens:5/1"], ["--limit", "requests:1.5/1"],
                ["--limit", "cost:0/1"], ["--limit", "cost:5"],
                ["--limit", "requests:5/1", "--rate", "3"], ["--usage-factor", "2-1"],
                ["--headers", "github"], ["--usage-header", "x usage"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


# -- a real process --------------------------------------------------------------------


@pytest.mark.slow
async def test_a_partner_process_with_budgets(http: aiohttp.ClientSession) -> None:
    args = ("--limit", "requests:3/30", "--limit", "cost:1000/30", "--window", "token-bucket",
            "--cost-field", "data.max_tokens", "--usage-factor", "0.5-0.6", "--seed", "1",
            "--headers", "anthropic", "--latency", "0")
    async with await PartnerProcess.start(*args) as p:
        answers = []
        for key, tokens in (("a", 600), ("a", 600), ("b", 600), ("a", 10), ("a", 10)):
            body = {"id": "j", "queue": "q", "data": {"api_key": key, "max_tokens": tokens}}
            async with http.post(f"{p.url}/v1/messages", json=body) as response:
                answers.append((response.status, response.headers.copy(),
                                await response.json()))
        assert [status for status, _, _ in answers] == [200, 200, 200, 200, 429]
        assert answers[0][1]["anthropic-ratelimit-requests-remaining"] == "2"
        assert answers[2][1]["anthropic-ratelimit-requests-remaining"] == "2"  # key b
        stats = await p.stats()
        a = stats["keys"]["a"]
        assert (a["accepted"], a["refused"]) == (3, 1)
        assert a["buckets"]["requests-30s"]["refused"] == 1
        assert a["cost"] == sum(body["usage"]["cost"] for status, _, body in answers
                                if status == 200) - answers[2][2]["usage"]["cost"]
        assert all(b["max_used"] <= b["limit"] for b in a["buckets"].values())
        assert await p.stop() == 0, p.stderr

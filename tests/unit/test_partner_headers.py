"""Each header family a partner sends, read into one shape: recorded header sets in
the form the vendors document them, then hostile values (docs/throttling.md,
"Partners")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hipq.partners.headers import PartnerReport, ReportedBucket, go_duration, read

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
CAP = 3600.0


def _read(headers: dict[str, str], max_seconds: float = CAP) -> PartnerReport:
    return read(headers, NOW, max_seconds=max_seconds)


def _in(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


# -- recorded header sets -------------------------------------------------------------

OPENAI = {  # the rate-limits guide's example answer
    "x-ratelimit-limit-requests": "60",
    "x-ratelimit-limit-tokens": "150000",
    "x-ratelimit-remaining-requests": "59",
    "x-ratelimit-remaining-tokens": "149984",
    "x-ratelimit-reset-requests": "1s",
    "x-ratelimit-reset-tokens": "6m0s",
}

ANTHROPIC = {  # the rate-limits page's response headers
    "anthropic-ratelimit-requests-limit": "50",
    "anthropic-ratelimit-requests-remaining": "49",
    "anthropic-ratelimit-requests-reset": "2026-12-02T12:00:01Z",
    "anthropic-ratelimit-tokens-limit": "90000",
    "anthropic-ratelimit-tokens-remaining": "88000",
    "anthropic-ratelimit-tokens-reset": "2026-12-02T12:00:02Z",
    "anthropic-ratelimit-input-tokens-limit": "80000",
    "anthropic-ratelimit-input-tokens-remaining": "79000",
    "anthropic-ratelimit-input-tokens-reset": "2026-12-02T12:00:02Z",
    "anthropic-ratelimit-output-tokens-limit": "16000",
    "anthropic-ratelimit-output-tokens-remaining": "16000",
    "anthropic-ratelimit-output-tokens-reset": "2026-12-02T12:00:00Z",
}

GITHUB = {  # X-RateLimit with an epoch reset
    "X-RateLimit-Limit": "5000",
    "X-RateLimit-Remaining": "4999",
    "X-RateLimit-Reset": str(int(_in(1800).timestamp())),
    "X-RateLimit-Used": "1",
    "X-RateLimit-Resource": "core",
}

IETF_STRUCTURED = {  # draft-ietf-httpapi-ratelimit-headers, the two-field form
    "RateLimit-Policy": '"burst";q=100;w=60,"daily";q=1000;w=86400',
    "RateLimit": '"burst";r=50;t=30,"daily";r=998;t=3600',
}

IETF_OLDER = {"RateLimit-Limit": "10", "RateLimit-Remaining": "1", "RateLimit-Reset": "7"}


def test_openai_requests_and_tokens_refill_until_their_reset() -> None:
    report = _read(OPENAI)
    assert report.family == "openai"
    assert report.buckets == (
        ReportedBucket("requests", "requests", 59, _in(1), limit=60, refills=True),
        ReportedBucket("tokens", "cost", 149984, _in(360), limit=150000, refills=True),
    )
    assert report.spent() is None


def test_anthropic_four_buckets_with_rfc3339_resets() -> None:
    report = _read(ANTHROPIC)
    assert report.family == "anthropic"
    by_name = {b.name: b for b in report.buckets}
    assert set(by_name) == {"requests", "tokens", "input-tokens", "output-tokens"}
    assert by_name["requests"] == ReportedBucket("requests", "requests", 49, _in(1),
                                                 limit=50, refills=True)
    assert by_name["tokens"].unit == "cost"
    assert by_name["tokens"].reset_at == _in(2)
    assert by_name["output-tokens"].reset_at == NOW


def test_x_ratelimit_epoch_reset() -> None:
    report = _read(GITHUB)
    assert report.family == "x-ratelimit"
    assert report.buckets == (ReportedBucket("requests", "requests", 4999, _in(1800),
                                             limit=5000),)


def test_x_ratelimit_reset_in_seconds() -> None:
    report = _read({"x-ratelimit-limit": "100", "x-ratelimit-remaining": "0",
                    "x-ratelimit-reset": "12"})
    assert report.spent() == ReportedBucket("requests", "requests", 0, _in(12), limit=100)


def test_ietf_structured_policies_name_limit_and_window() -> None:
    report = _read(IETF_STRUCTURED)
    assert report.family == "ietf"
    assert report.buckets == (
        ReportedBucket("burst", "requests", 50, _in(30), limit=100, window_seconds=60),
        ReportedBucket("daily", "requests", 998, _in(3600), limit=1000, window_seconds=86400),
    )


def test_ietf_structured_quota_unit_other_than_requests_is_cost() -> None:
    report = _read({"RateLimit-Policy": '"tok";q=90000;w=60;qu="content-bytes"',
                    "RateLimit": '"tok";r=0;t=20'})
    assert report.spent() == ReportedBucket("tok", "cost", 0, _in(20), limit=90000,
                                            window_seconds=60)


def test_ietf_older_fields_and_combined_form() -> None:
    assert _read(IETF_OLDER).buckets == (ReportedBucket("requests", "requests", 1, _in(7),
                                                        limit=10),)
    combined = _read({"RateLimit": "limit=10, remaining=0, reset=3"})
    assert combined.spent() == ReportedBucket("requests", "requests", 0, _in(3), limit=10)


def test_retry_after_seconds_and_http_date() -> None:
    assert _read({"Retry-After": "120"}).retry_at == _in(120)
    assert _read({"Retry-After": "Wed, 02 Dec 2026 12:01:00 GMT"}).retry_at == _in(60)
    report = _read({**OPENAI, "retry-after": "2"})
    assert report.retry_at == _in(2)
    assert report.family == "openai"


def test_no_headers_say_nothing() -> None:
    report = _read({"Content-Type": "application/json"})
    assert report == PartnerReport()
    assert not report.says_anything


# -- hostile values ------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "seconds"), [
    ("6m0s", 360), ("1h2m3.5s", 3723.5), ("20ms", 0.02), ("1.5s", 1.5), ("0s", 0),
    ("2", 2), ("1m", 60), ("500us", 0.0005),
])
def test_go_durations(raw: str, seconds: float) -> None:
    assert go_duration(raw) == pytest.approx(seconds)


@pytest.mark.parametrize("raw", [
    "", "garbage", "6m0", "s", "-1s", "1h-2m", "1e3s", "1 h", "\u00b2s", "\u0663s", "inf",
    "nan", "1d", "6m0sx", "m0s",
])
def test_go_durations_refused(raw: str) -> None:
    assert go_duration(raw) is None


def test_openai_garbage_reset_leaves_that_bucket_out() -> None:
    report = _read({**OPENAI, "x-ratelimit-reset-tokens": "soon"})
    assert [b.name for b in report.buckets] == ["requests"]


def test_openai_long_reset_is_capped() -> None:
    report = _read({**OPENAI, "x-ratelimit-reset-tokens": "999999h"})
    assert report.buckets[1].reset_at == _in(CAP)


def test_a_year_9999_anthropic_reset_is_capped() -> None:
    report = _read({"anthropic-ratelimit-requests-remaining": "0",
                    "anthropic-ratelimit-requests-reset": "9999-12-31T23:59:59Z"})
    spent = report.spent()
    assert spent is not None
    assert spent.reset_at == _in(CAP)
    assert _read({"anthropic-ratelimit-requests-remaining": "0",
                  "anthropic-ratelimit-requests-reset": "9999-12-31T23:59:59Z"},
                 max_seconds=86400).spent() == ReportedBucket(
        "requests", "requests", 0, _in(86400), refills=True)


def test_a_reset_in_the_past_is_now() -> None:
    report = _read({"anthropic-ratelimit-requests-remaining": "0",
                    "anthropic-ratelimit-requests-reset": "2001-01-01T00:00:00Z"})
    spent = report.spent()
    assert spent is not None
    assert spent.reset_at == NOW


@pytest.mark.parametrize("reset", ["2026-12-02T12:00:01", "tomorrow", "2026-13-45T00:00:00Z",
                                   "\uff12026-12-02T12:00:01Z"])
def test_anthropic_resets_that_are_not_rfc3339_times_are_left_out(reset: str) -> None:
    report = _read({"anthropic-ratelimit-requests-remaining": "0",
                    "anthropic-ratelimit-requests-reset": reset})
    assert report.buckets == ()


def test_a_negative_remaining_is_an_overdrawn_budget() -> None:
    report = _read({"x-ratelimit-remaining-requests": "-3",
                    "x-ratelimit-reset-requests": "2s"})
    assert report.spent() == ReportedBucket("requests", "requests", 0, _in(2), refills=True)


@pytest.mark.parametrize("remaining", ["\u00b2", "\u0663", "1e3", "0x10", "", "12abc",
                                       "9" * 40, " ", "NaN", "Infinity"])
def test_remaining_counts_that_are_not_plain_numbers_are_left_out(remaining: str) -> None:
    report = _read({"x-ratelimit-remaining": remaining, "x-ratelimit-reset": "5"})
    assert report.buckets == ()


@pytest.mark.parametrize("after", ["\u00b2", "-5", "1e3", "5.5", "\u0663", "soon", "",
                                   "Wed, 02 Dec 2026 12:01:00", "+5", " 5 5"])
def test_retry_after_values_that_are_not_clean_are_ignored(after: str) -> None:
    assert _read({"Retry-After": after}).retry_at is None


def test_a_huge_retry_after_is_capped() -> None:
    assert _read({"Retry-After": "999999999"}).retry_at == _in(CAP)
    assert _read({"Retry-After": "9" * 40}).retry_at == _in(CAP)
    assert _read({"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}).retry_at == _in(CAP)


def test_x_ratelimit_huge_epoch_is_capped_and_garbage_ignored() -> None:
    assert _read({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "99999999999"}
                 ).buckets[0].reset_at == _in(CAP)
    assert _read({"x-ratelimit-remaining": "0", "x-ratelimit-reset": "soon"}).buckets == ()


def test_malformed_structured_fields_never_raise() -> None:
    for value in ['"', ';;;', '"a";r=;t=', '"a";r=\u00b2;t=1', ",,,", '"x";r=1;t=1' * 1000]:
        report = _read({"RateLimit": value, "RateLimit-Policy": value})
        assert all(b.remaining >= 0 for b in report.buckets)
        assert len(report.buckets) <= 16


@given(st.dictionaries(
    st.sampled_from(sorted({*OPENAI, *ANTHROPIC, *map(str.lower, GITHUB), "ratelimit",
                            "ratelimit-policy", "retry-after", "ratelimit-reset"})),
    st.text(max_size=40)))
def test_any_values_give_a_bounded_report_and_never_raise(headers: dict[str, str]) -> None:
    report = _read(headers)
    for bucket in report.buckets:
        assert bucket.remaining >= 0
        assert NOW <= bucket.reset_at <= _in(CAP)
    assert report.retry_at is None or NOW <= report.retry_at <= _in(CAP)

"""The times a partner gives, read strictly (issue 46, findings 3 and 12a;
docs/throttling.md, "Who may pause, and for how long"): a number is ASCII digits,
a date is an ASCII HTTP date; anything else is no time at all (the doubling
applies), never an error. A clean but huge number is a time, capped later by
``backoff.max_partner_seconds``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hipq.bodies import ResponseRequest
from hipq.retry import partner_time
from hipq.targets.http import partner_outcome, retry_after
from hipq.targets.http_pool import Answer, Endpoint
from hipq.targets.interface import ACCEPTED, Completed

TARGET = Endpoint.parse("http://partner.example/v1/x")
NOW = datetime(2026, 1, 5, 12, tzinfo=UTC)
JUNK = ["\xb2", "\xb2\xb3", "1e3", "-5", "+5", "\u0663", "\u0661\u0662", "0x10", "4.",
        "1_000", "nan", "inf", "Infinity", " ", "5 s", "\uff15", "\U0001d7d3",
        "Wed, \u0662\u0661 Oct 2015 07:28:00 GMT", "\u00b9\u2070"]


def _answer(status: int, headers: dict[str, str]) -> Answer:
    return Answer(status=status, headers={k.lower(): v for k, v in headers.items()},
                  body=b"")


@pytest.mark.parametrize("raw", [*JUNK, "4.5"])  # delta-seconds are whole
def test_a_retry_after_that_is_not_ascii_digits_nor_a_date_is_no_time(raw: str) -> None:
    """``int("\\xb2")`` raises although ``"\\xb2".isdigit()``; ``int("\\u0663")`` is 3.
    Neither is a time: the throttled try has none (the doubling applies)."""
    answer = _answer(429, {"Retry-After": raw})
    assert retry_after(answer) is None
    outcome = partner_outcome(Completed(status="failed"), answer, TARGET)
    assert isinstance(outcome, Completed)
    assert (outcome.status, outcome.kind) == ("throttled", "throttled")
    assert "retry_after" not in outcome.error


@pytest.mark.parametrize("header", ["RateLimit-Reset", "X-RateLimit-Reset"])
@pytest.mark.parametrize("raw", JUNK)
def test_a_reset_that_is_not_an_ascii_number_is_no_time(header: str, raw: str) -> None:
    refused = partner_outcome(Completed(status="failed"),
                              _answer(429, {header: raw, "RateLimit-Remaining": "0"}), TARGET)
    assert isinstance(refused, Completed)
    assert "retry_after" not in refused.error
    spent = partner_outcome(ACCEPTED, _answer(202, {header: raw, "RateLimit-Remaining": "0"}),
                            TARGET)
    assert getattr(spent, "spent", None) is None
    structured = partner_outcome(ACCEPTED, _answer(202, {"RateLimit": f"r=0;t={raw}"}), TARGET)
    assert getattr(structured, "spent", None) is None


@pytest.mark.parametrize(("raw", "seconds"), [
    ("9" * 23, 1e9), ("1" * 5000, 1e9), ("999999999", 999999999.0), ("0" * 40 + "7", 7.0)])
def test_a_huge_clean_retry_after_is_a_time_not_an_error(raw: str, seconds: float) -> None:
    """Clean digits, however many: a time (at most 10**9 s here; the engine caps it at
    ``backoff.max_partner_seconds``), never ``int()``'s error beyond 4,300 digits."""
    assert retry_after(_answer(429, {"Retry-After": raw})) == seconds


@pytest.mark.parametrize("raw", ["99999999999999999999", "1" * 400])
def test_a_huge_clean_reset_is_a_far_time_not_an_error(raw: str) -> None:
    spent = partner_outcome(ACCEPTED, _answer(200, {"RateLimit-Remaining": "0",
                                                    "RateLimit-Reset": raw}), TARGET)
    when = getattr(spent, "spent", None)
    assert when is not None
    assert partner_time(when, NOW, cap=3600) == NOW + timedelta(seconds=3600)


def test_clean_values_still_read() -> None:
    assert retry_after(_answer(429, {"Retry-After": " 120 "})) == 120.0
    assert retry_after(_answer(503, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) == (
        "2015-10-21T07:28:00+00:00")
    spent = partner_outcome(ACCEPTED, _answer(200, {"X-RateLimit-Remaining": "0",
                                                    "X-RateLimit-Reset": "2.5"}), TARGET)
    assert getattr(spent, "spent", None) == 2.5


@given(raw=st.one_of(st.text(max_size=30),
                    st.text(alphabet="0123456789\xb2\xb3\xb9\u0663 \t.-+eE:,GMTWedOct",
                            max_size=30)))
def test_no_retry_after_raises(raw: str) -> None:
    for status in (429, 503):
        answer = _answer(status, {"Retry-After": raw, "RateLimit-Reset": raw,
                                  "RateLimit-Remaining": "0", "RateLimit": f"r=0;t={raw}"})
        after = retry_after(answer)
        assert after is None or isinstance(after, str) or 0 <= after <= 1e9
        partner_outcome(Completed(status="failed"), answer, TARGET)
        partner_outcome(ACCEPTED, _answer(200, answer.headers), TARGET)  # type: ignore[arg-type]


@pytest.mark.parametrize(("raw", "cap", "expected"), [
    (86400.0, 3600.0, 3600.0),
    (999999999.0, 3600.0, 3600.0),
    (30.0, 3600.0, 30.0),
    (200000.0, 172800.0, 172800.0),
    ("9999-12-31T23:59:59+00:00", 60.0, 60.0),
])
def test_a_partners_time_is_capped(raw: Any, cap: float, expected: float) -> None:
    assert partner_time(raw, NOW, cap=cap) == NOW + timedelta(seconds=expected)


@pytest.mark.parametrize("value", [999999999, 1e12, 365 * 86400 + 1])
def test_a_huge_retry_after_seconds_in_a_response_is_taken_and_capped(value: float) -> None:
    """A partner's callback or Kafka response with a huge time is not refused (the try
    would then time out and spend an attempt): it is kept, capped at a year, and the
    engine caps it again at ``backoff.max_partner_seconds``."""
    response = ResponseRequest(status="throttled", retry_after_seconds=value)
    assert response.retry_after_seconds == 365 * 86400


@pytest.mark.parametrize("value", [-5, -0.5, "\xb2", "1e3", "\u0663", "soon", True, [1], {}])
def test_a_junk_retry_after_seconds_in_a_response_is_ignored(value: Any) -> None:
    """Not refused (that would spend an attempt when the try times out): no time."""
    response = ResponseRequest.model_validate({"status": "throttled",
                                               "retry_after_seconds": value})
    assert response.retry_after_seconds is None


def test_clean_retry_after_seconds_in_a_response_read() -> None:
    assert ResponseRequest(status="throttled", retry_after_seconds=30).retry_after_seconds == 30
    assert ResponseRequest.model_validate(
        {"status": "throttled", "retry_after_seconds": "45"}).retry_after_seconds == 45
    assert ResponseRequest.model_validate(
        {"status": "throttled", "retry_after_seconds": 2.5}).retry_after_seconds == 2.5

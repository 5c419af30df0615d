"""Small pure pieces: signatures, downstream auth headers, answer -> outcome."""

from __future__ import annotations

import pytest
from pydantic import ValidationError as PydanticValidationError

from hipq.config import HttpTarget as HttpTargetConfig
from hipq.errors import ConfigError
from hipq.jobs import Job
from hipq.responses.signing import Signer
from hipq.targets.http import HttpTarget, auth_header, partner_outcome
from hipq.targets.http_pool import Answer, Endpoint
from hipq.targets.interface import ACCEPTED, Completed
from hipq.testing import FakeClock


def test_signatures_bind_key_and_attempt() -> None:
    signer = Signer("k1")
    sig = signer.sign("abc.1", 1, "tok")
    assert signer.verify("abc.1", 1, "tok", sig)
    assert not signer.verify("abc.1", 2, "tok", sig)
    assert not signer.verify("abc.2", 1, "tok", sig)
    assert not signer.verify("abc.1", 1, "other", sig)
    assert not Signer("k2").verify("abc.1", 1, "tok", sig)
    assert not signer.verify("abc.1", 1, "tok", sig.upper())
    assert not signer.verify("abc.1", 1, "tok", "é")
    url = signer.callback_url("http://h:1/", "a/b c", 3, "tok")
    assert url == (f"http://h:1/v1/responses/a%2Fb%20c?attempt=3&t=tok"
                   f"&sig={signer.sign('a/b c', 3, 'tok')}")


def test_auth_headers() -> None:
    assert auth_header(None) == {}
    assert auth_header({"type": "bearer", "token": "t"}) == {"Authorization": "Bearer t"}
    assert auth_header({"type": "basic", "username": "u", "password": "p"}) == {
        "Authorization": "Basic dTpw"}
    with pytest.raises(ConfigError):
        auth_header({"type": "digest"})


@pytest.mark.parametrize(("mode", "status", "expected"), [
    ("callback", 202, ACCEPTED),
    ("sync", 200, Completed(status="succeeded", result={"a": 1})),
    ("sync", 404, Completed(status="failed", retryable=False, kind="http_status",
                            error={"detail": "HTTP 404", "status": 404, "body": '{"a": 1}'})),
    ("callback", 408, Completed(status="failed", retryable=True, kind="http_status",
                                error={"detail": "HTTP 408", "status": 408,
                                       "body": '{"a": 1}'})),
    ("sync", 503, Completed(status="failed", retryable=True, kind="http_status",
                            error={"detail": "HTTP 503", "status": 503, "body": '{"a": 1}'})),
])
def test_answers_map_to_outcomes(mode: str, status: int, expected: object) -> None:
    config = HttpTargetConfig(kind="http", url="http://x/{queue}/{id}", mode=mode)  # type: ignore[arg-type]
    target = HttpTarget(config, None)
    assert target._outcome(status, "application/json", '{"a": 1}') == expected


def test_url_template_quotes_ids() -> None:
    config = HttpTargetConfig(kind="http", url="http://x/v1/{queue}/{id}")
    target = HttpTarget(config, None)
    now = FakeClock().now()
    job = Job(id="a:b.c", queue="q-1", run_at=now, created_at=now, updated_at=now)
    assert target.url_for(job) == "http://x/v1/q-1/a%3Ab.c"
    for url in ("ftp://x", "", "http://", "x/y", "http:///path"):
        with pytest.raises(PydanticValidationError, match="absolute http"):
            HttpTargetConfig(kind="http", url=url)
    with pytest.raises(ConfigError):  # a config built around the checks still fails
        HttpTarget(HttpTargetConfig.model_construct(kind="http", url="ftp://x"), None)


def _answer(status: int, **headers: str) -> Answer:
    return Answer(status=status, headers={k.lower().replace("_", "-"): v
                                          for k, v in headers.items()}, body=b"{}")


TARGET = Endpoint.parse("http://partner.example:8080/v1/x")


@pytest.mark.parametrize(("answer", "after"), [
    (_answer(429), None),
    (_answer(429, Retry_After="4"), 4.0),
    (_answer(503, Retry_After="Wed, 25 Nov 2026 12:00:00 GMT"), "2026-11-25T12:00:00+00:00"),
    (_answer(429, RateLimit_Reset="3", RateLimit_Remaining="0"), 3.0),
    (_answer(429, X_RateLimit_Reset="1795000000"), "2026-11-18T11:06:40+00:00"),
    (_answer(429, RateLimit="limit=10, remaining=0, reset=7"), 7.0),
])
def test_a_throttled_answer_carries_the_partners_time(answer: Answer, after: object) -> None:
    """docs/throttling.md: 429, or 503 with Retry-After, is throttled, with the partner's time."""
    outcome = partner_outcome(Completed(status="failed"), answer, TARGET)
    assert isinstance(outcome, Completed)
    assert (outcome.status, outcome.kind) == ("throttled", "throttled")
    assert outcome.error["detail"] == f"HTTP {answer.status} from http://partner.example:8080"
    assert outcome.error.get("retry_after") == after


def test_a_503_without_retry_after_is_a_plain_failure() -> None:
    plain = Completed(status="failed", retryable=True)
    assert partner_outcome(plain, _answer(503), TARGET) is plain


@pytest.mark.parametrize(("headers", "spent"), [
    ({"RateLimit_Remaining": "0", "RateLimit_Reset": "3"}, 3.0),
    ({"X_RateLimit_Remaining": "0", "X_RateLimit_Reset": "2.5"}, 2.5),
    ({"RateLimit": '"default";r=0;t=9'}, 9.0),
    ({"RateLimit_Remaining": "1", "RateLimit_Reset": "3"}, None),
    ({"RateLimit_Remaining": "0"}, None),
    ({"RateLimit_Remaining": "0", "RateLimit_Reset": "soon"}, None),
])
def test_a_success_that_spends_the_budget_says_until_when(headers: dict[str, str],
                                                          spent: float | None) -> None:
    accepted = partner_outcome(ACCEPTED, _answer(202, **headers), TARGET)
    assert getattr(accepted, "spent", None) == spent
    done = partner_outcome(Completed(status="succeeded", result=1), _answer(200, **headers),
                           TARGET)
    assert isinstance(done, Completed)
    assert (done.status, done.result, done.spent) == ("succeeded", 1, spent)

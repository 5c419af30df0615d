"""Small pure pieces: signatures, downstream auth headers, answer -> outcome."""

from __future__ import annotations

import pytest
from pydantic import ValidationError as PydanticValidationError

from hipq.config import HttpTarget as HttpTargetConfig
from hipq.errors import ConfigError
from hipq.jobs import Job
from hipq.responses.signing import Signer
from hipq.targets.http import HttpTarget, auth_header
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
    ("callback", 429, Completed(status="failed", retryable=True, kind="http_status",
                                error={"detail": "HTTP 429", "status": 429,
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

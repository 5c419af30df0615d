"""What the HTTP target's requests carry, against a real downstream on 127.0.0.1 and a
live daemon (SQLite and PostgreSQL): the configured headers over the defaults; no
header that could split or reframe a request, whether it comes from the queue's
config (422 when the queue is made, nothing stored) or from a producer's key (the try
fails without retry and nothing reaches the downstream)."""

from __future__ import annotations

import pytest

from tests.api.conftest import Downstream, LiveFactory, http_queue


async def test_configured_headers_replace_the_defaults(live: LiveFactory,
                                                       downstream: Downstream) -> None:
    api = (await live()).api
    status, body = await api.call("POST", "/v1/jobs", http_queue("h", downstream.url, target={
        "mode": "sync", "headers": {"user-agent": "billing/2", "X-Tenant": "acme"},
        "auth": {"type": "bearer", "token": "s3cret"}}))
    assert status == 201, body
    assert (await api.call("PUT", "/v1/jobs/h/one", {"data": {"n": 1}}))[0] == 201
    await api.wait_job("h", "one", "succeeded")
    (sent,) = downstream.headers
    assert sent["User-Agent"] == "billing/2"
    assert (sent["X-Tenant"], sent["Authorization"]) == ("acme", "Bearer s3cret")
    assert sent["Content-Type"] == "application/json"
    assert sent["Hipq-Correlation-Key"] == (await api.job("h", "one"))["correlation_key"]
    assert downstream.received[0]["data"] == {"n": 1}


@pytest.mark.parametrize(("headers", "named"), [
    ({"X-Ok": "a\r\nX-Injected: 1"}, "line break"),
    ({"X-Ok": "a\nb"}, "line break"),
    ({"Bad Name": "v"}, "HTTP token"),
    ({"Host": "elsewhere.example"}, "written by hipq"),
    ({"content-length": "0"}, "written by hipq"),
    ({"Transfer-Encoding": "chunked"}, "written by hipq"),
    ({"Hipq-Correlation-Key": "mine"}, "written by hipq"),
])
async def test_headers_that_would_break_a_request_are_refused(
        live: LiveFactory, downstream: Downstream, headers: dict[str, str],
        named: str) -> None:
    api = (await live()).api
    status, body = await api.call("POST", "/v1/jobs", http_queue(
        "bad", downstream.url, target={"headers": headers}))
    assert status == 422, body
    assert named in str(body)
    assert (await api.call("GET", "/v1/jobs/bad"))[0] == 404


async def test_a_key_with_a_line_break_fails_its_try_and_sends_nothing(
        live: LiveFactory, downstream: Downstream) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", http_queue("k", downstream.url)))[0] == 201
    status, body = await api.call("PUT", "/v1/jobs/k/evil", {
        "correlation_key": "order-1\r\nX-Injected: yes"})
    assert status == 201, body
    job = await api.wait_job("k", "evil", "failed")
    assert job["attempt"] == 1  # not retried
    assert job["error"]["kind"] == "transport", job
    assert "HTTP header" in str(job["error"]), job
    # the daemon goes on: a plain job of the same queue is launched
    assert (await api.call("PUT", "/v1/jobs/k/plain", {}))[0] == 201
    await downstream.wait_for(1)
    assert [b["id"] for b in downstream.received] == ["plain"]


@pytest.mark.parametrize(("auth", "named"), [
    ({"type": "digest", "token": "t0ken-value"}, "target auth must be"),
    ({"type": "bearer", "token": "t0ken\r\nX-Injected: 1"}, "line break"),
    ({"type": "basic", "password": "t0ken-value"}, "target auth must be"),
])
async def test_a_bad_auth_is_refused_when_the_queue_is_made(
        live: LiveFactory, downstream: Downstream, auth: dict[str, str], named: str) -> None:
    api = (await live()).api
    status, body = await api.call("POST", "/v1/jobs", http_queue(
        "auth", downstream.url, target={"auth": auth}))
    assert status == 422, body
    assert named in str(body)
    assert "t0ken" not in str(body)  # the secret is never repeated
    assert (await api.call("GET", "/v1/jobs/auth"))[0] == 404

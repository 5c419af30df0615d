"""Tokens and roles on every route; signed callback URLs that cannot be forged."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest

from hipq.api.app import effective_routes
from hipq.config import ApiConfig
from hipq.responses.signing import Signer
from tests.api.conftest import (
    ADMIN,
    PRODUCER,
    READER,
    SIGNING_KEY,
    Downstream,
    LiveFactory,
    http_queue,
)

OPEN = {("GET", "/healthz"), ("GET", "/"), ("GET", "/metrics"), ("GET", "/dashboard/app.js"),
        ("GET", "/dashboard/style.css"),
        ("POST", "/v1/responses/{key}")}
_FILL = {"queue": "q", "id": "j1", "key": "k.1", "tail": "t", "partner": "p"}


def _concrete(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: _FILL[m.group(1)], path)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_every_protected_route_needs_a_token(live: LiveFactory) -> None:
    api = (await live()).api
    routes = effective_routes(ApiConfig())
    assert {(r.method, r.path) for r in routes if r.role is None} == OPEN
    for route in routes:
        if (route.method, route.path) in OPEN:
            continue
        for token in (None, "wrong-token-0123456789", ADMIN[:-1]):
            status, body = await api.call(route.method, _concrete(route.path), {}, token=token)
            assert status == 401, (route.method, route.path, body)
            assert body["error"]["code"] == "unauthorized"
        status, _ = await api.call(route.method, _concrete(route.path), {},
                                   headers={"Authorization": f"Basic {ADMIN}"}, token=None)
        assert status == 401
    for path in ("/healthz", "/openapi.json", "/", "/metrics"):
        assert (await api.call("GET", path, token=None))[0] == 200


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_roles(live: LiveFactory) -> None:
    api = (await live()).api
    queue = {"id": "r"}
    assert (await api.call("POST", "/v1/jobs", queue, token=PRODUCER))[0] == 403
    assert (await api.call("POST", "/v1/jobs", queue, token=ADMIN))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/r/a", {}, token=READER))[0] == 403
    assert (await api.call("PUT", "/v1/jobs/r/a", {}, token=PRODUCER))[0] == 201
    assert (await api.call("GET", "/v1/jobs/r/a", token=READER))[0] == 200
    assert (await api.call("DELETE", "/v1/jobs/r/a", token=READER))[0] == 403
    assert (await api.call("POST", "/v1/jobs/r/pause", token=PRODUCER))[0] == 403


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_protected_metrics(live: LiveFactory) -> None:
    api = (await live(api={"protect_metrics": True})).api
    assert (await api.call("GET", "/metrics", token=None))[0] == 401
    assert (await api.call("GET", "/metrics", token=READER))[0] == 200


def _with(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()} | changes
    return f"{parts.scheme}://{parts.netloc}{parts.path}?" + "&".join(
        f"{k}={v}" for k, v in query.items())


async def test_forged_tampered_and_replayed_signatures_change_nothing(
        live: LiveFactory, downstream: Downstream) -> None:
    lv = await live()
    api = lv.api
    await api.call("POST", "/v1/jobs", http_queue("s", downstream.url, correlation={
        "request": "fixed-{id}"}))
    await api.call("PUT", "/v1/jobs/s/j", {})
    [launch] = await downstream.wait_for(1)
    url = launch["callback_url"]
    query = parse_qs(urlsplit(url).query)
    sig, token = query["sig"][0], query["t"][0]
    key = launch["correlation_key"]
    forged_key = Signer("not-the-key").sign(key, 1, token)
    base = url.split("?")[0]
    attempts = [
        base,                                              # no signature
        f"{base}?attempt=1",                               # no sig
        _with(url, sig="0" * 64),                          # forged
        _with(url, sig=forged_key),                        # signed with another key
        _with(url, sig=sig[:-1] + ("0" if sig[-1] != "0" else "1")),  # tampered
        _with(url, attempt="2"),                           # replayed to another attempt
        _with(url, t="0" * 32),                            # another job's token
        _with(url.replace(key, "fixed-other"), ),          # another job's key
        _with(url, attempt="x"),
    ]
    for bad in attempts:
        status, body = await api.call("POST", bad, {"result": "forged"}, token=None)
        assert status == 401, (bad, body)
        assert body["error"]["code"] == "unauthorized"
    job = await api.job("s", "j")
    assert job["status"] == "running"
    assert job["result"] is None
    status, stats = await api.call("GET", "/v1/stats")
    assert sum(stats["responses"].values()) == 0  # nothing reached the inbox
    # the genuine URL still works; the test key signs like the daemon does
    assert Signer(SIGNING_KEY).verify(key, 1, token, sig)
    assert (await api.call("POST", url, {"result": "real"}, token=None))[0] == 202
    assert (await api.wait_job("s", "j", "succeeded"))["result"] == "real"

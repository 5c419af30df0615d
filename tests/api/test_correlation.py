"""Correlation keys over HTTP: request templates, response templates over body,
path and query, and the plugin alternative."""

from __future__ import annotations

import pytest

from tests.api.conftest import Downstream, LiveFactory, http_queue

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


async def test_templates_over_request_and_response(live: LiveFactory,
                                                   downstream: Downstream) -> None:
    api = (await live()).api
    await api.call("POST", "/v1/jobs", http_queue("t", downstream.url, correlation={
        "request": "{data.shop}:{data.order}", "response": "{query.shop}:{path.tail}"}))
    await api.call("PUT", "/v1/jobs/t/a", {"data": {"shop": "s1", "order": 9}})
    [launch] = await downstream.wait_for(1)
    assert launch["correlation_key"] == "s1:9"
    assert downstream.headers[0]["Hipq-Correlation-Key"] == "s1:9"
    status, ack = await api.call("POST", "/v1/inbox/t/9?shop=s1",
                                 {"status": "failed", "retryable": False, "error": "no stock"})
    assert (status, ack["correlation_key"]) == (202, "s1:9")
    job = await api.wait_job("t", "a", "failed")
    assert job["history"][0]["outcome"] == "response_failed"
    # a second live job may not take the same fixed key
    await api.call("PUT", "/v1/jobs/t/b", {"data": {"shop": "s1", "order": 10}})
    status, err = await api.call("PUT", "/v1/jobs/t/c", {"data": {"shop": "s1", "order": 10}})
    assert status == 409, err
    status, err = await api.call("POST", "/v1/inbox/t", {"status": "succeeded"})
    assert status == 422
    assert err["error"]["code"] == "correlation_template"


async def test_plugin_alternative(live: LiveFactory, downstream: Downstream) -> None:
    api = (await live()).api
    status, _ = await api.call("POST", "/v1/jobs", http_queue(
        "p", downstream.url, correlation={"plugin": "hipq.contrib.correlations:order_key"}))
    assert status == 201
    await api.call("PUT", "/v1/jobs/p/a", {"data": {"order_id": 5}})
    [launch] = await downstream.wait_for(1)
    assert launch["correlation_key"] == "order-5"
    status, _ = await api.call("POST", "/v1/inbox/p", {"orderId": 5, "result": {"ok": 1}})
    assert status == 202
    assert (await api.wait_job("p", "a", "succeeded"))["result"] == {"ok": 1}
    status, err = await api.call("POST", "/v1/jobs", http_queue(
        "p2", downstream.url, correlation={"plugin": "plugins.nothing:here"}))
    assert status == 422, err

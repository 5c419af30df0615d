"""The HTTP target's transport: bounded requests in flight per queue over one
shared keep-alive pool, launch timeouts, and heartbeats at the callback URL."""

from __future__ import annotations

import asyncio
from typing import Any

from hipq.responses.signing import load_signer
from hipq.store import Store
from hipq.testing import FakeClock
from tests.api.conftest import Downstream, LiveFactory, http_queue


async def test_requests_in_flight_are_bounded_per_queue(live: LiveFactory,
                                                        downstream: Downstream) -> None:
    release = asyncio.Event()
    in_flight = peak = 0

    async def reply(body: dict[str, Any]) -> tuple[int, Any]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await release.wait()
        in_flight -= 1
        return 200, {"id": body["id"]}

    downstream.reply = reply
    api = (await live()).api
    await api.call("POST", "/v1/jobs", http_queue("b", downstream.url, target={
        "mode": "sync", "max_in_flight": 2}))
    status, _ = await api.call("POST", "/v1/jobs/b/batch", {"jobs": [{"id": f"j{i}"}
                                                                     for i in range(6)]})
    assert status == 200
    await downstream.wait_for(2)
    for i in range(6):
        await api.wait_job("b", f"j{i}", "running")
    assert (peak, len(downstream.received)) == (2, 2)  # six running, two requests out
    release.set()
    for i in range(6):
        assert (await api.wait_job("b", f"j{i}", "succeeded"))["result"] == {"id": f"j{i}"}
    assert peak == 2
    ports = {h["X-Peer-Port"] for h in downstream.headers}
    assert len(ports) <= 2, "connections are kept alive and reused"


async def test_launch_timeout_is_a_retryable_timeout(live: LiveFactory,
                                                     downstream: Downstream) -> None:
    never = asyncio.Event()

    async def reply(body: dict[str, Any]) -> tuple[int, Any]:
        if body["attempt"] == 1:
            await never.wait()
        return 202, {}

    downstream.reply = reply
    api = (await live()).api
    await api.call("POST", "/v1/jobs", http_queue("slow", downstream.url, target={
        "timeout_seconds": 0.3}))
    await api.call("PUT", "/v1/jobs/slow/x", {})
    job = await api.wait_job("slow", "x", "running", check=lambda j: j["attempt"] == 2)
    assert job["history"][0]["outcome"] == "timeout"
    never.set()


async def test_heartbeats_push_the_deadline(live: LiveFactory, downstream: Downstream) -> None:
    clock = FakeClock()
    lv = await live(clock=clock)
    api = lv.api
    await api.call("POST", "/v1/jobs", http_queue("hb", downstream.url, attempts=1,
                                                  timeout_seconds=30))
    await api.call("PUT", "/v1/jobs/hb/long", {})
    [launch] = await downstream.wait_for(1)
    await api.wait_job("hb", "long", "running")
    for _ in range(3):
        clock.advance(20)
        status, _ = await api.call("POST", launch["callback_url"],
                                   {"status": "running", "extend_seconds": 30}, token=None)
        assert status == 202
        await lv.daemon.tick()
        assert (await api.job("hb", "long"))["status"] == "running"
    status, _ = await api.call("POST", launch["callback_url"], {"result": "done"}, token=None)
    assert status == 202
    assert (await api.wait_job("hb", "long", "succeeded"))["result"] == "done"


async def test_signing_key_is_generated_once_and_stored(store: Store) -> None:
    first = await load_signer(store, None)
    second = await load_signer(store, None)
    assert first.sign("k.1", 1, "t") == second.sign("k.1", 1, "t")
    configured = await load_signer(store, "from-config")
    assert configured.sign("k.1", 1, "t") != first.sign("k.1", 1, "t")

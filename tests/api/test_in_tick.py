"""A daemon whose Python target runs in its tick (``in_tick: true``): when a tick's
tries all ended within it, the capacity they took is free at once and no answer
will come to wake the next tick, so the next one runs right away, not at the next
interval."""

from __future__ import annotations

import time
from typing import Any

from tests.api.conftest import LiveFactory


async def done(job: Any) -> dict[str, Any]:
    """The target: succeeds at once."""
    return {"n": job.data["n"]}


async def test_ticks_follow_each_other_while_capacity_is_the_bound(live: LiveFactory) -> None:
    daemon = await live(reconcile={"interval_seconds": 5},
                        api={"plugin_modules": ["tests.api.test_in_tick"]})
    api = daemon.api
    status, body = await api.call("POST", "/v1/jobs", {
        "id": "fast", "concurrency": 10,
        "target": {"kind": "python", "function": "tests.api.test_in_tick:done",
                   "in_tick": True}})
    assert status in (200, 201), body
    started = time.monotonic()
    status, body = await api.call("POST", "/v1/jobs/fast/batch", {
        "jobs": [{"id": f"j{i}", "data": {"n": i}} for i in range(200)]})
    assert status == 200, body
    # 20 ticks of 10: with the 5 s interval between them this would take minutes
    last = await api.wait_job("fast", "j199", "succeeded", within=4.0)
    assert last["result"] == {"n": 199}
    assert last["attempt"] == 1
    assert time.monotonic() - started < 4.0
    # its history is the one try, as for a job claimed first (on PostgreSQL the
    # archived row holds it: schema version 11)
    assert [(h["attempt"], h["outcome"], h["launched_at"] is not None)
            for h in last["history"]] == [(1, "succeeded", True)]
    assert last["history_count"] == 1

"""Resume means resume (issue 48; docs/throttling.md, "The pause holds for its
scope"): ``POST /v1/jobs/{queue}/resume`` after a partner's 429 with
``Retry-After: 120`` ends the pause and makes the throttled job itself due again,
with the clock not moved; a job the producer scheduled later (``run_after``) and one
waiting for an ordinary retry's back-off keep their time. A live daemon, a real
partner on 127.0.0.1, SQLite and PostgreSQL, the clock fake."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from aiohttp import web

from hipq.testing import FakeClock
from tests.api.conftest import PRODUCER, Api, LiveFactory


@dataclass
class Partner:
    """Answers per job id: ``answers[id]`` is a list of (status, headers) taken one per
    request (the last one stays); a job not named succeeds."""

    url: str = ""
    answers: dict[str, list[tuple[int, dict[str, str]]]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.Response:
        job_id = request.match_info["id"]
        self.hits[job_id] = self.hits.get(job_id, 0) + 1
        queue = self.answers.get(job_id) or [(200, {})]
        status, headers = queue.pop(0) if len(queue) > 1 else queue[0]
        return web.json_response({"ok": status == 200}, status=status, headers=headers)


@pytest.fixture
async def partner() -> AsyncIterator[Partner]:
    p = Partner()
    app = web.Application()
    app.router.add_post("/{queue}/{id}", p.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    p.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield p
    await runner.cleanup()


def _queue(url: str) -> dict[str, Any]:
    return {"id": "q", "attempts": 3,
            "target": {"kind": "http", "url": url + "/{queue}/{id}", "mode": "sync",
                       "timeout_seconds": 5},
            "retry": {"strategy": "fixed", "delay_seconds": 600}}


def _run_at(job: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(job["run_at"])


async def _put(api: Api, job_id: str, body: dict[str, Any] | None = None) -> None:
    status, answer = await api.call("PUT", f"/v1/jobs/q/{job_id}", body or {}, token=PRODUCER)
    assert status == 201, answer


async def test_a_resume_after_a_retry_after_of_120_makes_the_throttled_job_due(
        live: LiveFactory, partner: Partner) -> None:
    clock = FakeClock()
    lv = await live(clock=clock)
    api = lv.api
    assert (await api.call("POST", "/v1/jobs", _queue(partner.url)))[0] == 201
    start = clock.now()

    # an ordinary failed try: retried 600 s later, its attempt spent
    partner.answers["retrying"] = [(500, {}), (200, {})]
    await _put(api, "retrying")
    retrying = await api.wait_job("q", "retrying", "queued",
                                  check=lambda j: len(j["history"]) == 1)
    assert (retrying["attempt"], _run_at(retrying)) == (1, start + timedelta(seconds=600))
    # a job the producer put 300 s out
    await _put(api, "later", {"run_after": (start + timedelta(seconds=300)).isoformat()})

    # the partner's "not now" for two minutes
    partner.answers["held"] = [(429, {"Retry-After": "120"}), (200, {})]
    await _put(api, "held")
    held = await api.wait_job("q", "held", "queued", check=lambda j: len(j["history"]) == 1)
    assert held["attempt"] == 0
    assert held["history"][0]["outcome"] == "throttled"
    assert _run_at(held) == start + timedelta(seconds=120)
    status, queue = await api.call("GET", "/v1/jobs/q")
    assert status == 200, queue
    assert [datetime.fromisoformat(b["until"]) for b in queue["backoff"]] == [
        start + timedelta(seconds=120)]

    # the owner sees a resume by the queue record's updated_at: a later time than
    # the queue's creation (a fake clock that never moved would give it the same one)
    clock.advance(5)
    status, resumed = await api.call("POST", "/v1/jobs/q/resume")
    assert status == 200, resumed
    assert resumed["backoff"] == []
    done = await api.wait_job("q", "held", "succeeded", within=10)
    assert clock.now() == start + timedelta(seconds=5)  # 115 s before the partner's time
    assert done["attempt"] == 1
    assert [t["outcome"] for t in done["history"]] == ["throttled", "succeeded"]
    assert partner.hits["held"] == 2

    # the others keep their time and were not launched again
    for job_id, due in (("retrying", start + timedelta(seconds=600)),
                        ("later", start + timedelta(seconds=300))):
        job = await api.job("q", job_id)
        assert (job["status"], _run_at(job)) == ("queued", due), job
    assert partner.hits.get("retrying") == 1
    assert "later" not in partner.hits

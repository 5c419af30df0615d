"""Late responses and long histories stay bounded (docs/security.md, "Expensive reads": at most
10 late responses recorded per try; a job's JSON carries its last 50 history
entries and their total count), against a live daemon over real sockets, on SQLite
and PostgreSQL. Time is a FakeClock: timeouts and retries move only when told to."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from hipq.testing import FakeClock
from tests.api.conftest import Api, Downstream, Live, LiveFactory, http_queue

LATE_KEPT = 10  # late responses recorded per try
SHOWN = 50  # history entries in a job's JSON


async def _start(live: LiveFactory, downstream: Downstream,
                 **queue: Any) -> tuple[Live, FakeClock]:
    clock = FakeClock()
    lv = await live(clock=clock, responses={"buffer_seconds": 60})
    status, body = await lv.api.call("POST", "/v1/jobs", http_queue("e", downstream.url,
                                                                    **queue))
    assert status == 201, body
    return lv, clock


async def _until(probe: Callable[[], Any], lv: Live, within: float = 20.0) -> Any:
    """Wake the loop and poll ``probe`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + within
    while not (value := await probe()):
        assert time.monotonic() < deadline, "condition not reached"
        lv.daemon.wake()
        await asyncio.sleep(0.02)  # polling the API; there is no event to wait on
    return value


async def _late(api: Api, callback_url: str, results: Iterable[str]) -> None:
    """Post one late response per result at once (distinct bodies: none is a repeat)."""
    answers = await asyncio.gather(*(api.call("POST", callback_url, {"result": r}, token=None)
                                     for r in results))
    for status, body in answers:
        assert (status, body["duplicate"]) == (202, False), body


async def _settled(api: Api, late: int) -> dict[str, int] | None:
    """The response counts once ``late`` responses are marked late and none waits."""
    status, body = await api.call("GET", "/v1/stats")
    assert status == 200, body
    counts: dict[str, int] = body["responses"]
    return counts if counts["late"] == late and counts["pending"] == 0 else None


async def _job_at(api: Api, job_id: str, status: str, attempt: int) -> dict[str, Any] | None:
    job = await api.job("e", job_id)
    return job if (job["status"], job["attempt"]) == (status, attempt) else None


async def test_late_responses_to_a_timed_out_try_are_bounded(
        live: LiveFactory, downstream: Downstream) -> None:
    lv, clock = await _start(live, downstream, attempts=1, timeout_seconds=30)
    api = lv.api
    assert (await api.call("PUT", "/v1/jobs/e/slow", {}))[0] == 201
    [launch] = await downstream.wait_for(1)
    await api.wait_job("e", "slow", "running")
    clock.advance(31)
    await _until(lambda: _job_at(api, "slow", "failed", 1), lv)
    url = launch["callback_url"]

    await _late(api, url, [f"burst-{n}" for n in range(20)])  # one sweep: one batch
    clock.advance(2)
    await _until(lambda: _settled(api, 20), lv)
    for n in range(10):  # one at a time: a batch each
        await _late(api, url, [f"apart-{n}"])
        clock.advance(2)
        await _until(lambda n=n: _settled(api, 21 + n), lv)

    job = await api.job("e", "slow")
    late = [h for h in job["history"] if h["outcome"] == "late_response"]
    assert len(late) == LATE_KEPT
    assert {h["attempt"] for h in late} == {1}
    assert [h["outcome"] for h in job["history"]] == ["timeout"] + ["late_response"] * LATE_KEPT
    assert job["history_count"] == 1 + LATE_KEPT
    assert (job["status"], job["result"]) == ("failed", None)  # none was applied
    stored = await lv.daemon.service.store.job_attempts("e", "slow")
    assert len(stored) == 1 + LATE_KEPT  # the rest were handled, not recorded


def _entry(h: dict[str, Any]) -> tuple[int, str, datetime | None]:
    at = h["finished_at"]
    return h["attempt"], h["outcome"], None if at is None else datetime.fromisoformat(at)


async def test_a_long_history_answers_its_last_entries_and_their_count(
        live: LiveFactory, downstream: Downstream) -> None:
    """Six tries that time out, each followed by 12 late responses: 66 entries
    recorded (a timeout and 10 late responses per try); the job's JSON carries the
    last 50, in history order, and counts 66."""
    tries = 6
    lv, clock = await _start(live, downstream, attempts=tries, timeout_seconds=30,
                             retry={"strategy": "fixed", "delay_seconds": 10})
    api = lv.api
    assert (await api.call("PUT", "/v1/jobs/e/long", {}))[0] == 201
    for attempt in range(1, tries + 1):
        launches = await downstream.wait_for(attempt)
        await _until(lambda a=attempt: _job_at(api, "long", "running", a), lv)
        clock.advance(31)
        ended = "failed" if attempt == tries else "queued"
        await _until(lambda a=attempt, s=ended: _job_at(api, "long", s, a), lv)
        await _late(api, launches[-1]["callback_url"], [f"{attempt}-{n}" for n in range(12)])
        clock.advance(2)
        await _until(lambda a=attempt: _settled(api, 12 * a), lv)
        clock.advance(10)  # past the retry delay: the next try

    job = await api.job("e", "long")
    stored = await lv.daemon.service.store.job_attempts("e", "long")
    assert len(job["history"]) == SHOWN
    assert job["history_count"] == len(stored)
    assert [_entry(h) for h in job["history"]] == [
        _entry(a.to_json()) for a in stored[-SHOWN:]]
    assert job["history"][-1]["attempt"] == tries  # the most recent ones
    assert len(stored) == tries * (1 + LATE_KEPT)

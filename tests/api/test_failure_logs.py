"""One structured log line per failed try and per give-up; a Python target's
traceback is kept on the try (bounded)."""

from __future__ import annotations

import logging

import pytest

from hipq.jobs import Job
from hipq.targets.python import TRACEBACK_CHARS
from tests.api.conftest import LiveFactory


def explode(job: Job) -> None:
    raise ValueError("kaboom " + "x" * 10_000)


async def test_failed_tries_are_logged_and_keep_the_traceback(
        live: LiveFactory, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="hipq.jobs")
    queue = {"id": "py", "attempts": 2, "retry": {"strategy": "fixed", "delay_seconds": 0.01},
             "target": {"kind": "python", "function": "tests.api.test_failure_logs:explode"}}
    lv = await live(queues=[queue])
    api = lv.api
    status, body = await api.call("PUT", "/v1/jobs/py/j1", {"data": {"secret": "s3cr3t"}})
    assert status == 201, body
    job = await api.wait_job("py", "j1", "failed", check=lambda j: len(j["history"]) == 2)
    trace = job["history"][0]["error"]["data"]["traceback"]
    assert "ValueError: kaboom" in trace
    assert "in explode" in trace
    assert len(trace) <= TRACEBACK_CHARS + 10
    assert trace.rstrip().endswith("...")  # the long error line was cut

    lines = [r for r in caplog.records if r.name == "hipq.jobs"]
    actions = [(r.action, r.queue, r.job_id, r.attempt, r.error_kind)  # type: ignore[attr-defined]
               for r in lines]
    assert actions == [("try_failed", "py", "j1", 1, "response_failed"),
                       ("job_gave_up", "py", "j1", 2, "response_failed")]
    assert lines[1].levelno == logging.ERROR
    assert all(len(r.detail) <= 300 for r in lines)  # type: ignore[attr-defined]
    assert not any("s3cr3t" in r.getMessage() for r in caplog.records)

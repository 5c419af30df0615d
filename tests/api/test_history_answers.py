"""Every job can be read, whatever its history holds, and an answer the server cannot
build is its own fault (issue 46, finding 11; docs/http-api.md, "Errors"): a live
daemon over real sockets, on SQLite and PostgreSQL.

A history entry whose ``error`` was not an object (a late response's text, recorded
as sent) made ``GET /v1/jobs/{queue}/{id}`` fail its own answer model, and that
failure went out as a 422 ``invalid_request`` naming ``history.1.error``: the reader
blamed for the server's data."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from hipq.jobs import Attempt
from hipq.testing import FakeClock
from tests.api.conftest import Api, Downstream, LiveFactory, http_queue
from tests.contract.history_rows import stored_errors, write_history_row

NO_TARGET = {"id": "h", "attempts": 1}  # nothing launches: the job stays queued


async def _queued_job(api: Api, job_id: str) -> dict[str, Any]:
    assert (await api.call("POST", "/v1/jobs", NO_TARGET))[0] == 201
    assert (await api.call("PUT", f"/v1/jobs/h/{job_id}", {}))[0] == 201
    return await api.job("h", job_id)


async def test_history_entries_with_non_object_errors_are_served(
        live: LiveFactory, db_url: str) -> None:
    """Rows written straight into the database, each ``error`` a bare JSON value:
    the job reads (200), each entry's error as an object."""
    api = (await live()).api
    await _queued_job(api, "j")
    clock = FakeClock()
    for n, value in enumerate(["boom", 42, ["a", 1], True, {"kind": "x", "detail": "y"}]):
        await write_history_row(db_url, "h", "j", attempt=n + 1, outcome="late_response",
                                error_json=json.dumps(value), at=clock.advance(1))

    status, job = await api.call("GET", "/v1/jobs/h/j")
    assert status == 200, job
    assert [h["error"] for h in job["history"]] == [
        {"kind": "response_failed", "detail": "boom"},
        {"kind": "response_failed", "detail": "", "data": 42},
        {"kind": "response_failed", "detail": "", "data": ["a", 1]},
        {"kind": "response_failed", "detail": "", "data": True},
        {"kind": "x", "detail": "y"}]
    assert job["history_count"] == 5


async def _until(probe: Callable[[], Any], lv: Any, within: float = 20.0) -> Any:
    """Wake the loop and poll ``probe`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + within
    while not (value := await probe()):
        assert time.monotonic() < deadline, "condition not reached"
        lv.daemon.wake()
        await asyncio.sleep(0.02)  # polling the API; there is no event to wait on
    return value


async def test_a_late_failure_with_a_text_error_is_recorded_and_served_as_an_object(
        live: LiveFactory, downstream: Downstream, db_url: str) -> None:
    """The sequence of the finding: a try ends without its response (here a timeout;
    in the chaos run, a ``lost`` try), then the downstream's failure arrives with its
    error as a text. It is recorded late, as an object, and the job reads."""
    clock = FakeClock()
    lv = await live(clock=clock, responses={"buffer_seconds": 60})
    api = lv.api
    queue = http_queue("e", downstream.url, attempts=1, timeout_seconds=30)
    assert (await api.call("POST", "/v1/jobs", queue))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/e/slow", {}))[0] == 201
    [launch] = await downstream.wait_for(1)
    await api.wait_job("e", "slow", "running")
    clock.advance(31)

    async def failed() -> bool:
        status, body = await api.call("GET", "/v1/jobs/e/slow")
        return status == 200 and body["status"] == "failed"

    await _until(failed, lv)
    status, body = await api.call("POST", launch["callback_url"],
                                  {"status": "failed", "error": "disk full"}, token=None)
    assert status == 202, body

    async def recorded() -> bool:
        return len(await stored_errors(db_url, "e", "slow")) == 2

    clock.advance(2)
    await _until(recorded, lv)
    late = {"kind": "response_failed", "detail": "disk full"}
    assert (await stored_errors(db_url, "e", "slow"))[1] == late  # the writer's own row
    status, job = await api.call("GET", "/v1/jobs/e/slow")
    assert status == 200, job
    assert [h["outcome"] for h in job["history"]] == ["timeout", "late_response"]
    assert job["history"][1]["error"] == late


async def test_an_answer_the_server_cannot_build_is_a_logged_500(
        live: LiveFactory, db_url: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Output building made to fail (an entry whose error the answer model refuses):
    a 500 ``internal`` with nothing of the model's complaint in it, and the
    traceback in the log; a bad request beside it is still the reader's 422."""
    api = (await live()).api
    await _queued_job(api, "k")
    await write_history_row(db_url, "h", "k", attempt=1, outcome="late_response",
                            error_json=json.dumps({"kind": "x"}), at=FakeClock().now())
    shown = Attempt.to_json
    monkeypatch.setattr(Attempt, "to_json",
                        lambda self: {**shown(self), "error": "not an object"})
    caplog.set_level(logging.ERROR, logger="hipq.api")

    status, body = await api.call("GET", "/v1/jobs/h/k")
    assert status == 500, body
    assert body == {"error": {"code": "internal", "message": "internal error (logged)",
                              "details": None}}
    [logged] = [r for r in caplog.records if r.name.startswith("hipq.api")
                and "could not build the answer" in r.getMessage()]
    assert logged.levelno == logging.ERROR
    assert logged.exc_info is not None  # the traceback
    assert "GET /v1/jobs/h/k" in logged.getMessage()

    status, body = await api.call("PUT", "/v1/jobs/h/bad", {"priority": "high"})
    assert status == 422, body
    assert body["error"]["code"] == "invalid_request"

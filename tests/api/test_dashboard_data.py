"""The two reads the dashboard added (docs/dashboard.md), on SQLite and PostgreSQL:
``GET /v1/outcomes`` (the daemon's outcomes of the last hour, per minute) and
``GET /v1/job-search`` (a job by its id alone, or in one queue)."""

from __future__ import annotations

import pytest

from hipq.api import job_search
from hipq.api.outcome_history import KEPT_MINUTES
from tests.api.conftest import Api, LiveFactory


async def _queues(api: Api) -> None:
    for queue in ("alpha", "beta"):
        assert (await api.call("POST", "/v1/jobs", {"id": queue}))[0] == 201
    past = "2020-01-01T00:00:00Z"
    jobs = [{"id": f"x{i}", "expires_at": past} for i in range(3)]
    assert (await api.call("POST", "/v1/jobs/alpha/batch", {"jobs": jobs}))[0] == 200
    assert (await api.call("PUT", "/v1/jobs/beta/x0", {"expires_at": past}))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/beta/live", {}))[0] == 201
    for queue, job_id in (("alpha", "x2"), ("beta", "x0")):
        await api.wait_job(queue, job_id, "expired")


async def test_outcomes_of_the_last_hour(live: LiveFactory) -> None:
    lv = await live()
    api = lv.api
    await _queues(api)
    status, body = await api.call("GET", "/v1/outcomes")
    assert status == 200, body
    assert body["queue"] is None
    assert body["bucket_seconds"] == 60
    assert len(body["minutes"]) == KEPT_MINUTES
    assert sum(m["counts"].get("expired", 0) for m in body["minutes"]) == 4
    assert body["queues"] == {"alpha": {"expired": 3}, "beta": {"expired": 1}}
    assert body["recorded_since"] is not None

    one = (await api.call("GET", "/v1/outcomes?name=beta"))[1]
    assert sum(m["counts"].get("expired", 0) for m in one["minutes"]) == 1
    assert one["queues"] == {}
    for bad in ("name=", "name=a%20b", "name=" + "q" * 101, "other=1"):
        status, body = await api.call("GET", "/v1/outcomes?" + bad)
        assert status == 422, (bad, body)


async def test_a_job_found_by_its_id(live: LiveFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    lv = await live()
    api = lv.api
    await _queues(api)
    status, body = await api.call("GET", "/v1/job-search?id=x0")
    assert status == 200, body
    assert [(j["queue"], j["status"]) for j in body["jobs"]] == [("alpha", "expired"),
                                                                ("beta", "expired")]
    assert body["searched"] == 2
    assert body["complete"] is True
    assert "history" not in body["jobs"][0]

    body = (await api.call("GET", "/v1/job-search?id=live"))[1]
    assert [(j["queue"], j["id"], j["status"]) for j in body["jobs"]] == [
        ("beta", "live", "queued")]
    body = (await api.call("GET", "/v1/job-search?id=x1&name=beta"))[1]
    assert body == {"jobs": [], "searched": 1, "complete": True}

    monkeypatch.setattr(job_search, "SEARCHED_QUEUES", 1)
    body = (await api.call("GET", "/v1/job-search?id=x0"))[1]
    assert [j["queue"] for j in body["jobs"]] == ["alpha"]
    assert body["searched"] == 1
    assert body["complete"] is False

    for bad in ("", "id=", "id=a/b", "id=x0&name=", "id=" + "j" * 201):
        status, body = await api.call("GET", "/v1/job-search?" + bad)
        assert status == 422, (bad, body)

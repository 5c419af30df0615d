"""What the API shows and what reads cost (issue 13 findings 2, 9 and 10), against
a live daemon over real sockets, on SQLite and PostgreSQL: secrets are write-only,
counts come from a short-lived snapshot, list pages are bounded in bytes, a
tampered cursor is a 400, and no error body carries SQL."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from hipq.api.policy import keep_secrets, redacted
from hipq.config import QueueConfig
from hipq.store import Store
from tests.api.conftest import Api, Downstream, LiveFactory, http_queue

SECRETS = ["bearer-secret-value-1", "header-secret-value-2", "option-secret-value-3",
           "basic-password-value-4"]


def _no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, secret


async def _text(api: Api, method: str, path: str, body: Any = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {api.token}"}
    async with api.session.request(method, api.base + path, json=body,
                                   headers=headers) as answer:
        return answer.status, await answer.text()


# -- finding 2: secrets are write-only ---------------------------------------------


async def test_secrets_never_appear_in_answers(live: LiveFactory, downstream: Downstream) -> None:
    api = (await live()).api
    secret_queue = http_queue("s", downstream.url, target={
        "auth": {"type": "bearer", "token": SECRETS[0]},
        "headers": {"X-Api-Key": SECRETS[1]}})
    secret_queue["throttler"] = {"plugin": "hipq.contrib.throttlers:MaxPerTick",
                                 "options": {"limit": 5}}
    python_queue = {"id": "p", "target": {"kind": "python",
                                          "function": "hipq.contrib.example_targets:flaky",
                                          "options": {"fail_until_attempt": 1,
                                                      "api_token": SECRETS[2]}},
                    "retry": {"strategy": "fixed", "delay_seconds": 1}}
    for body in (secret_queue, python_queue):
        status, text = await _text(api, "POST", "/v1/jobs", body)
        assert status == 201, text
        _no_secret(text)
    for method, path in (("GET", "/v1/jobs"), ("GET", "/v1/jobs/s"), ("GET", "/v1/jobs/p"),
                         ("POST", "/v1/jobs/s/pause"), ("POST", "/v1/jobs/s/resume"),
                         ("GET", "/v1/stats"), ("GET", "/metrics")):
        status, text = await _text(api, method, path)
        assert status == 200, (path, text)
        _no_secret(text)
    config = (await api.call("GET", "/v1/jobs/s"))[1]["config"]
    assert config["target"]["auth"] == {"type": "bearer", "token": "***"}
    assert config["target"]["headers"] == {"X-Api-Key": "***"}
    assert config["throttler"]["options"] == {"limit": 5}  # not a secret: shown
    python = (await api.call("GET", "/v1/jobs/p"))[1]["config"]
    assert python["target"]["options"] == {"fail_until_attempt": 1, "api_token": "***"}
    # an option a strategy refuses is named in the error, its value is not
    status, text = await _text(api, "POST", "/v1/jobs", {
        "id": "r", "retry": {"strategy": "fixed", "password": SECRETS[3]}})
    assert status == 422
    assert "password" in text
    _no_secret(text)


def test_redaction_covers_plugin_and_retry_options() -> None:
    config = QueueConfig.model_validate({
        "id": "q", "throttler": {"plugin": "hipq.contrib.throttlers:MaxPerTick",
                                 "options": {"limit": 1, "nested": {"apiKey": "s1"},
                                             "list": [{"Secret": "s2"}]}},
        "retry": {"plugin": "hipq.contrib.retries:StepBackoff", "options": {"token": "s3"}}})
    shown = json.dumps(redacted(config))
    for secret in ("s1", "s2", "s3"):
        assert f'"{secret}"' not in shown
    assert '"limit": 1' in shown
    kept = keep_secrets(QueueConfig.model_validate(redacted(config)), config)
    assert kept == config


async def test_an_update_sending_the_mask_back_keeps_the_secret(
        live: LiveFactory, downstream: Downstream) -> None:
    api = (await live()).api
    body = http_queue("s", downstream.url, target={
        "auth": {"type": "bearer", "token": SECRETS[0]}, "headers": {"X-Api-Key": SECRETS[1]}})
    assert (await api.call("POST", "/v1/jobs", body))[0] == 201
    shown = (await api.call("GET", "/v1/jobs/s"))[1]["config"]
    shown["attempts"] = 5  # a client edits what it read and sends it back
    status, answer = await api.call("POST", "/v1/jobs", shown)
    assert status == 200, answer
    assert answer["config"]["attempts"] == 5
    assert (await api.call("PUT", "/v1/jobs/s/j", {}))[0] == 201
    await downstream.wait_for(1)
    headers = downstream.headers[0]
    assert headers["Authorization"] == f"Bearer {SECRETS[0]}"  # the stored secret, kept
    assert headers["X-Api-Key"] == SECRETS[1]
    # "***" where nothing is stored is refused, and changes nothing
    status, answer = await api.call("POST", "/v1/jobs", http_queue("new", downstream.url, target={
        "auth": {"type": "bearer", "token": "***"}}))
    assert status == 422, answer
    assert (await api.call("GET", "/v1/jobs/new"))[0] == 404


# -- finding 9: cheap reads ----------------------------------------------------------


async def test_counts_are_computed_at_most_once_per_two_seconds(live: LiveFactory) -> None:
    lv = await live(api={"stats_max_age_seconds": 2})
    api = lv.api
    assert lv.daemon.service is not None
    service = lv.daemon.service
    calls = 0
    original = service.stats

    async def counting() -> Any:
        nonlocal calls
        calls += 1
        return await original()

    service.stats = counting  # type: ignore[method-assign]
    await api.call("POST", "/v1/jobs", {"id": "a"})
    await api.call("POST", "/v1/jobs", {"id": "b"})
    started = time.monotonic()
    for _ in range(10):
        for method, path in (("GET", "/v1/stats"), ("GET", "/metrics"), ("GET", "/v1/jobs"),
                             ("GET", "/v1/jobs/a"), ("POST", "/v1/jobs/a/pause"),
                             ("POST", "/v1/jobs/a/resume")):
            status, body = await api.call(method, path)
            assert status == 200, (path, body)
    elapsed = time.monotonic() - started
    assert calls <= 2 + int(elapsed / 2), (calls, elapsed)
    # a queue's own flag is always current, even from a cached snapshot
    assert (await api.call("POST", "/v1/jobs/a/pause"))[1]["stats"]["paused"] is True
    # and the counts catch up within the bound
    assert (await api.call("PUT", "/v1/jobs/a/j", {}))[0] == 201
    deadline = time.monotonic() + 10
    while (await api.call("GET", "/v1/stats"))[1]["queues"][0]["queued"] != 1:
        assert time.monotonic() < deadline, "the counts never caught up"
        await asyncio.sleep(0.1)  # polling the API: the snapshot ages in real time


async def test_archived_jobs_by_queue_name_have_an_index(store: Store) -> None:
    async with store.engine.connect() as conn:
        indexes = await conn.run_sync(lambda c: sa.inspect(c).get_indexes("archived_jobs"))
    columns = {i["name"]: i["column_names"] for i in indexes}
    assert columns["ix_archived_jobs_queue_finished"] == ["queue", "finished_at", "id"]


async def test_archived_pages_are_bounded_in_bytes(live: LiveFactory) -> None:
    api = (await live()).api
    await api.call("POST", "/v1/jobs", {"id": "big"})
    blob = "x" * 700_000
    for n in range(12):
        status, body = await api.call("PUT", f"/v1/jobs/big/j{n:02d}", {
            "data": {"blob": blob}, "expires_at": "2020-01-01T00:00:00Z"})
        assert status == 201, body
    deadline = time.monotonic() + 30
    while (await api.call("GET", "/v1/jobs/big"))[1]["stats"]["queued"]:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)  # polling the API until every job expired
    seen: list[str] = []
    cursor = None
    sizes = []
    for _ in range(20):
        path = "/v1/archived-jobs?name=big&limit=1000" + (f"&cursor={cursor}" if cursor else "")
        status, text = await _text(api, "GET", path)
        assert status == 200, text[:300]
        sizes.append(len(text))
        page = json.loads(text)
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == [f"j{n:02d}" for n in range(12)]  # no gap, no repeat
    assert len(sizes) >= 2
    assert max(sizes) <= 5 * 1024 * 1024


# -- finding 10: tampered cursors, error bodies without SQL -------------------------


def _old_cursor(*parts: Any) -> str:
    """A cursor in the format given out before the readable one (base64 JSON)."""
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


@pytest.mark.parametrize("cursor", [
    _old_cursor("2026-01-01T00:00:00+00:00", "q", "j"),  # old cursors stop working
    "5~q", "5~q~j~k", "-5~q~j", "x~q~j", "1234567890123456789~q~j", "5~~j", "5~q~",
    "5~q%00~j", "5~q~j%2Fk", "5~q%20~j", "5~" + "q" * 201 + "~j",
    "////", "e30", "%EF%BC%95~q~j"])
async def test_a_tampered_cursor_is_refused(live: LiveFactory, cursor: str) -> None:
    api = (await live()).api
    status, body = await api.call("GET", f"/v1/archived-jobs?cursor={cursor}")
    assert status in {400, 422}, body
    assert body["error"]["code"] in {"invalid_cursor", "invalid_request"}


@pytest.mark.parametrize("cursor", ["0~q~j", "999999999999999999~" + "z" * 200 + "~j",
                                    "5~-~.", "5~a:b~c.d_e-f"])
async def test_any_cursor_of_the_published_shape_is_a_position(live: LiveFactory,
                                                               cursor: str) -> None:
    """<µs since 0001-01-01>~<queue>~<id>: the pattern /openapi.json publishes."""
    api = (await live()).api
    assert await api.call("GET", f"/v1/archived-jobs?cursor={cursor}") == (
        200, {"jobs": [], "next_cursor": None})


async def test_health_and_errors_never_show_sql(live: LiveFactory) -> None:
    lv = await live()
    store = lv.daemon.store
    assert store is not None

    async def broken() -> None:
        raise OperationalError("SELECT secret_column FROM jobs WHERE x = %(p)s",
                               {"p": "bind-parameter-value"}, Exception("server closed"))

    store.ping = broken  # type: ignore[method-assign]
    async with lv.api.session.get(lv.api.base + "/healthz") as answer:
        text = await answer.text()
    assert answer.status == 503
    assert json.loads(text)["error"]["message"] == "database unavailable"
    for leak in ("SELECT", "secret_column", "bind-parameter-value", "server closed",
                 "Traceback"):
        assert leak not in text


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)  # pooled server connections
async def test_a_dead_postgresql_connection_is_a_plain_503(live: LiveFactory, backend: str,
                                                           pg_url: str) -> None:
    import asyncpg

    lv = await live()
    assert (await lv.api.call("GET", "/healthz"))[0] == 200
    store = lv.daemon.store
    assert store is not None
    database = store.engine.url.database
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = $1 AND pid <> pg_backend_pid()", database)
    finally:
        await admin.close()
    for _ in range(3):
        async with lv.api.session.get(lv.api.base + "/healthz") as answer:
            text = await answer.text()
        assert answer.status in {200, 503}, text
        assert "SELECT" not in text
        assert "SQL" not in text
        if answer.status == 503:
            assert json.loads(text)["error"]["message"] == "database unavailable"

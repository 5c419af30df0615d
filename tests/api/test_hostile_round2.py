"""Hostile input, second round (issue 23; docs/security.md): the plugin allowlist by
object, cross-site requests, list pages bounded in bytes, secrets bound to their
origin, what readers see of target URLs. Against a live daemon over real sockets,
on SQLite and PostgreSQL; each refused request changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import ADMIN, PRODUCER, READER, LiveFactory

# -- finding 1: the allowlist checks the object, not only the module ----------------

ESCAPES = [
    # an attribute path that walks out of an allowed module into subprocess
    ("throttler", "hipq.contrib.throttlers:CapacityPool.__init__"),
    ("throttler", "hipq.contrib.example_targets:logging.os.system"),
    ("retry", "hipq.contrib.example_targets:logging.os.system"),
    ("correlation", "hipq.contrib.example_targets:logging.os.system"),
    ("function", "hipq.contrib.example_targets:logging.os.system"),
    # one plain name, but an object the allowed module only imported
    ("throttler", "hipq.contrib.throttlers:CapacityPool"),
    ("retry", "hipq.contrib.retries:timedelta"),
    ("function", "hipq.contrib.example_targets:logging"),
    ("correlation", "hipq.contrib.correlations:Mapping"),
    # dunders of an allowed module
    ("throttler", "hipq.contrib.throttlers:__loader__"),
    ("function", "hipq.contrib.throttlers:__builtins__"),
]


def _queue_naming(place: str, path: str, options: dict[str, Any]) -> dict[str, Any]:
    if place == "function":
        return {"id": "x", "target": {"kind": "python", "function": path, "options": options}}
    if place == "correlation":
        return {"id": "x", place: {"plugin": path}}
    return {"id": "x", place: {"plugin": path, "options": options}}


@pytest.mark.parametrize(("place", "path"), ESCAPES)
async def test_plugin_paths_cannot_walk_out_of_an_allowed_module(
        live: LiveFactory, tmp_path: Path, place: str, path: str) -> None:
    api = (await live(api={"plugin_modules": ["plugins", "hipq.contrib", "hipq.targets"]})).api
    status, body = await api.call("POST", "/v1/jobs", _queue_naming(place, path, {}))
    assert (status, body["error"]["code"]) == (422, "plugin_not_allowed"), body
    assert (await api.call("GET", "/v1/jobs/x"))[0] == 404


async def test_the_reported_popen_path_runs_nothing(live: LiveFactory, tmp_path: Path) -> None:
    """The finding as reported: Popen reached through an allowed module's imports,
    its options the command line. The allowlist here includes the module walked
    through, as the old default (``hipq``) did."""
    api = (await live(api={"plugin_modules": ["hipq"]})).api
    marker = tmp_path / "ran"
    for place in ("throttler", "retry", "correlation", "function"):
        path = "hipq.targets.python:asyncio.subprocess.subprocess.Popen"
        body = _queue_naming(place, path, {"args": ["touch", str(marker)]})
        status, answer = await api.call("POST", "/v1/jobs", body)
        assert (status, answer["error"]["code"]) == (422, "plugin_not_allowed"), answer
        for name in ("subprocess:Popen", "asyncio.subprocess:subprocess"):
            status, answer = await api.call("POST", "/v1/jobs", _queue_naming(place, name, {}))
            assert (status, answer["error"]["code"]) == (422, "plugin_not_allowed"), answer
    assert not marker.exists()
    assert (await api.call("GET", "/v1/jobs"))[1]["queues"] == []


async def test_the_default_allowlist_is_plugins_and_contrib(live: LiveFactory) -> None:
    api = (await live()).api
    status, body = await api.call("POST", "/v1/jobs",
                                  {"id": "r", "retry": {"plugin": "hipq.retry:Fixed"}})
    assert (status, body["error"]["code"]) == (422, "plugin_not_allowed")
    allowed = [{"id": "a", "retry": {"plugin": "hipq.contrib.retries:StepBackoff"}},
               {"id": "b", "throttler": {"plugin": "hipq.contrib.throttlers:MaxPerTick",
                                         "options": {"limit": 2}}},
               {"id": "c", "target": {"kind": "python",
                                      "function": "hipq.contrib.example_targets:greet"}},
               {"id": "d", "throttler": {"plugin": "plugins.example_throttlers:SlowStart",
                                         "options": {"step": 2}},
                "retry": {"plugin": "plugins.example_retries:TransientOnly"},
                "correlation": {"plugin": "plugins.example_correlations:invoice_key"}}]
    for queue in allowed:
        status, body = await api.call("POST", "/v1/jobs", queue)
        assert status == 201, body


# -- finding 2: cross-site requests --------------------------------------------------

CHANGES = [("POST", "/v1/jobs", {"id": "web"}), ("PUT", "/v1/jobs/q/j", {"data": {}}),
           ("POST", "/v1/jobs/q/pause", None), ("DELETE", "/v1/jobs/q/k", None),
           ("POST", "/v1/jobs/q/batch", {"jobs": [{"id": "b"}]})]


@pytest.mark.parametrize("tokens", [True, False])
@pytest.mark.parametrize("headers", [
    {"Origin": "http://127.0.0.1:9"}, {"Origin": "null"},
    {"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"}])
async def test_cross_site_requests_change_nothing(live: LiveFactory, tokens: bool,
                                                  headers: dict[str, str]) -> None:
    extra: dict[str, Any] = {} if tokens else {"api": {"tokens": []}}
    api = (await live(**extra)).api
    assert (await api.call("POST", "/v1/jobs", {"id": "q"}))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/q/k", {"run_after": "2999-01-01T00:00:00Z"}))[0] \
        == 201
    for method, path, body in CHANGES:
        status, answer = await api.call(method, path, body, headers=headers)
        assert (status, answer["error"]["code"]) == (403, "cross_site"), (method, path, answer)
    assert (await api.call("GET", "/v1/jobs/web"))[0] == 404
    assert (await api.call("GET", "/v1/jobs/q/j"))[0] == 404
    assert (await api.call("GET", "/v1/jobs/q/b"))[0] == 404
    assert (await api.call("GET", "/v1/jobs/q"))[1]["paused"] is False
    assert (await api.job("q", "k"))["status"] == "queued"
    status, _ = await api.call("GET", "/v1/jobs/q", headers=headers)  # reads stay open
    assert status == 200


async def test_a_no_cors_post_without_content_type_is_refused(live: LiveFactory) -> None:
    """What a page's ``fetch(url, {mode: 'no-cors', body: new Blob([json])})`` sends:
    no Content-Type, an Origin, ``Sec-Fetch-Site: cross-site``; no token."""
    api = (await live(api={"tokens": []})).api
    body = json.dumps({"id": "web"}).encode()
    async with api.session.post(api.base + "/v1/jobs", data=body,
                                skip_auto_headers=["Content-Type"],
                                headers={"Origin": "http://localhost:3000",
                                         "Sec-Fetch-Site": "cross-site",
                                         "Sec-Fetch-Mode": "no-cors"}) as answer:
        assert answer.status == 403
    assert (await api.call("GET", "/v1/jobs/web"))[0] == 404


async def test_the_api_own_origin_and_tools_without_origin_are_accepted(
        live: LiveFactory) -> None:
    api = (await live()).api
    own = {"Origin": api.base, "Sec-Fetch-Site": "same-origin"}
    assert (await api.call("POST", "/v1/jobs", {"id": "q"}, headers=own))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/q/a", {}, headers=own))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/q/b", {}))[0] == 201  # curl: no Origin
    none = {"Sec-Fetch-Site": "none"}  # typed in the address bar, a bookmark
    assert (await api.call("PUT", "/v1/jobs/q/c", {}, headers=none))[0] == 201


async def test_public_url_is_the_api_origin(live: LiveFactory) -> None:
    api = (await live(api={"public_url": "https://hipq.example.com"})).api
    status, _ = await api.call("POST", "/v1/jobs", {"id": "q"},
                               headers={"Origin": "https://hipq.example.com"})
    assert status == 201
    status, _ = await api.call("POST", "/v1/jobs", {"id": "r"},
                               headers={"Origin": "https://other.example.com"})
    assert status == 403


async def test_dashboard_pages_refuse_framing(live: LiveFactory) -> None:
    api = (await live()).api
    async with api.session.get(api.base + "/") as answer:
        assert answer.status == 200
        assert answer.headers["X-Frame-Options"] == "DENY"
        policy = answer.headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in policy
        assert "script-src 'self'" in policy


# -- finding 5: list pages bounded in bytes ------------------------------------------


async def test_queued_jobs_pages_are_bounded_in_bytes(live: LiveFactory) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", {"id": "q"}))[0] == 201
    blob = "x" * 900_000
    for i in range(12):
        status, body = await api.call("PUT", f"/v1/jobs/q/j{i:02d}",
                                      {"data": {"blob": blob},
                                       "run_after": "2999-01-01T00:00:00Z"})
        assert status == 201, body
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        path = "/v1/queued-jobs?name=q&limit=1000" + (f"&cursor={cursor}" if cursor else "")
        async with api.session.get(api.base + path,
                                   headers={"Authorization": f"Bearer {READER}"}) as answer:
            raw = await answer.read()
            assert answer.status == 200, raw[:300]
        assert len(raw) < 6 * 1024 * 1024
        page = json.loads(raw)
        seen += [job["id"] for job in page["jobs"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"j{i:02d}" for i in range(12)]  # nothing repeated or skipped
    assert pages >= 3


# -- finding 6: a new origin needs its secrets --------------------------------------


async def test_a_secret_does_not_follow_the_target_to_a_new_origin(live: LiveFactory) -> None:
    api = (await live()).api
    target = {"kind": "http", "url": "http://127.0.0.1:9001/jobs/{id}",
              "auth": {"type": "bearer", "token": "t0ps3cret"},
              "headers": {"X-Api-Key": "k3y"}}
    assert (await api.call("POST", "/v1/jobs", {"id": "q", "target": target}))[0] == 201
    shown = (await api.call("GET", "/v1/jobs/q"))[1]["config"]["target"]
    assert shown["auth"]["token"] == "***"
    for url in ("http://evil.example:9001/jobs/{id}", "https://127.0.0.1:9001/jobs/{id}",
                "http://127.0.0.1:9002/jobs/{id}"):
        moved = {**shown, "url": url}
        status, body = await api.call("POST", "/v1/jobs", {"id": "q", "target": moved})
        assert (status, body["error"]["code"]) == (422, "secret_needs_resending"), body
        assert "t0ps3cret" not in json.dumps(body)
    stored = (await api.call("GET", "/v1/jobs/q"))[1]["config"]["target"]
    assert stored["url"] == "http://127.0.0.1:9001/jobs/{id}"
    same_origin = {**shown, "url": "http://127.0.0.1:9001/v2/jobs/{id}"}
    assert (await api.call("POST", "/v1/jobs", {"id": "q", "target": same_origin}))[0] == 200
    resent = {**shown, "url": "http://other.example/jobs/{id}",
              "auth": {"type": "bearer", "token": "n3w"}, "headers": {"X-Api-Key": "k2"}}
    assert (await api.call("POST", "/v1/jobs", {"id": "q", "target": resent}))[0] == 200


# -- finding 12: what readers see of target URLs ------------------------------------


async def test_readers_see_target_urls_without_credentials(live: LiveFactory) -> None:
    api = (await live()).api
    url = "http://user:pa55@127.0.0.1:9001/jobs/{id}?api_key=s3cret&v=2"
    assert (await api.call("POST", "/v1/jobs",
                           {"id": "q", "target": {"kind": "http", "url": url}}))[0] == 201
    for token in (READER, PRODUCER):
        for path in ("/v1/jobs/q", "/v1/jobs"):
            status, body = await api.call("GET", path, token=token)
            assert status == 200
            text = json.dumps(body)
            assert "pa55" not in text
            assert "s3cret" not in text
            assert "user:" not in text
            assert "127.0.0.1:9001/jobs/{id}?api_key=***&v=***" in text
    admin = (await api.call("GET", "/v1/jobs/q", token=ADMIN))[1]["config"]["target"]
    assert admin["url"] == url


# -- beyond the findings: DNS rebinding ----------------------------------------------


async def test_a_rebound_host_name_is_refused_without_tokens(live: LiveFactory) -> None:
    """A page at ``http://attacker.example:PORT`` whose name now resolves to
    127.0.0.1 is same-origin with the daemon: its requests carry
    ``Host: attacker.example:PORT``. Without tokens, only loopback names are served."""
    api = (await live(api={"tokens": []})).api
    port = api.base.rsplit(":", 1)[1]
    rebound = {"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}"}
    status, body = await api.call("GET", "/v1/jobs", headers={"Host": f"attacker.example:{port}"})
    assert (status, body["error"]["code"]) == (403, "host_not_allowed")
    status, body = await api.call("POST", "/v1/jobs", {"id": "web"}, headers=rebound)
    assert status == 403
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
        assert (await api.call("GET", "/v1/jobs", headers={"Host": host}))[0] == 200
    assert (await api.call("GET", "/v1/jobs/web"))[0] == 404
    tokened = (await live()).api  # with tokens a rebound page has none to send
    assert (await tokened.call("GET", "/v1/jobs", headers={"Host": "attacker.example"}))[0] \
        == 200

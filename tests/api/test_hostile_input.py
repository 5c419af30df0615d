"""Hostile input at the door (docs/security.md; issue 13 findings 3, 6, 7, 8
and the Python-target part of 10), against a live daemon over real sockets, on
SQLite and PostgreSQL. Each refused request must change nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from yarl import URL

from hipq.responses.signing import Signer
from tests.api.conftest import ADMIN, SIGNING_KEY, Api, Downstream, LiveFactory, http_queue

BROWSER_TYPES = ["text/plain", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=x"]


def nested(depth: int) -> dict[str, Any]:
    """An object ``depth`` levels deep (``{}`` is one level)."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


async def _raw(api: Api, method: str, path: str, body: bytes,
               content_type: str | None) -> tuple[int, Any]:
    """Send ``body`` with exactly this Content-Type (or none at all)."""
    headers = {"Authorization": f"Bearer {ADMIN}"}
    skip: list[str] = []
    if content_type is None:
        skip.append("Content-Type")
    else:
        headers["Content-Type"] = content_type
    async with api.session.request(method, api.base + path, data=body, headers=headers,
                                   skip_auto_headers=skip) as answer:
        return answer.status, await answer.json(content_type=None)


# -- finding 3: the 415 rule -------------------------------------------------------


@pytest.mark.parametrize("content_type", BROWSER_TYPES)
async def test_bodies_a_web_page_can_send_are_refused(live: LiveFactory,
                                                      content_type: str) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", {"id": "q"}))[0] == 201
    queue = b'{"id": "web"}'
    status, body = await _raw(api, "POST", "/v1/jobs", queue, content_type)
    assert (status, body["error"]["code"]) == (415, "unsupported_media_type")
    assert (await api.call("GET", "/v1/jobs/web"))[0] == 404
    status, _ = await _raw(api, "PUT", "/v1/jobs/q/j", b'{"data": {}}', content_type)
    assert status == 415
    assert (await api.call("GET", "/v1/jobs/q/j"))[0] == 404
    status, _ = await _raw(api, "POST", "/v1/jobs/q/pause", b"", content_type)
    assert status == 415  # even without a body: no page may pause a queue
    assert (await api.call("GET", "/v1/jobs/q"))[1]["paused"] is False


@pytest.mark.parametrize("content_type", [None, "application/json",
                                          "application/json; charset=utf-8"])
async def test_json_and_no_content_type_are_accepted(live: LiveFactory,
                                                     content_type: str | None) -> None:
    api = (await live()).api
    status, body = await _raw(api, "POST", "/v1/jobs", b'{"id": "q"}', content_type)
    assert status == 201, body
    status, body = await _raw(api, "PUT", "/v1/jobs/q/j", b'{"data": {"a": 1}}', content_type)
    assert status == 201, body


# -- findings 3 and 10: plugins and Python targets only from api.plugin_modules -----


def _write_module(tmp_path: Path, name: str) -> None:
    (tmp_path / f"{name}.py").write_text(
        "from pathlib import Path\n"
        "Path(__file__).with_suffix('.imported').write_text('yes')\n"
        "class Throttle:\n"
        "    def __init__(self, **options):\n"
        "        pass\n"
        "    def select(self, ctx):\n"
        "        raise RuntimeError('never')\n"
        "def run(job):\n"
        "    return 1\n")


@pytest.fixture
def outside_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """An importable module outside the allowed ones that says when it is imported."""
    name = f"hostile_{tmp_path.name.replace('-', '_')}"
    _write_module(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, tmp_path / f"{name}.imported"
    sys.modules.pop(name, None)


async def test_plugins_named_over_the_api_come_only_from_allowed_modules(
        live: LiveFactory, tmp_path: Path, outside_module: tuple[str, Path]) -> None:
    api = (await live()).api
    module, imported = outside_module
    marker = tmp_path / "ran"
    bodies = [
        {"id": "a", "throttler": {"plugin": "subprocess:Popen",
                                  "options": {"args": ["touch", str(marker)]}}},
        {"id": "b", "target": {"kind": "python", "function": "os:system"}},
        {"id": "c", "retry": {"plugin": "os:system"}},
        {"id": "d", "correlation": {"plugin": f"{module}:run"}},
        {"id": "e", "throttler": {"plugin": f"{module}:Throttle"}},
        {"id": "f", "target": {"kind": "python", "function": f"{module}:run"}},
        {"id": "g", "throttler": {"plugin": "pluginsx.evil:Thing"}},  # a prefix is not enough
        {"id": "h", "throttler": {"plugin": "hipqx:Thing"}},
    ]
    for body in bodies:
        status, answer = await api.call("POST", "/v1/jobs", body)
        assert (status, answer["error"]["code"]) == (422, "plugin_not_allowed"), body
        assert (await api.call("GET", f"/v1/jobs/{body['id']}"))[0] == 404
    assert not marker.exists()  # nothing ran
    assert not imported.exists()  # nothing was even imported
    assert module not in sys.modules
    allowed = [{"id": "ok1", "throttler": {"plugin": "hipq.contrib.throttlers:MaxPerTick",
                                           "options": {"limit": 3}}},
               {"id": "ok2", "target": {"kind": "python",
                                        "function": "hipq.contrib.example_targets:greet"}},
               {"id": "ok3", "retry": {"plugin": "hipq.contrib.retries:StepBackoff"}}]
    for body in allowed:
        status, answer = await api.call("POST", "/v1/jobs", body)
        assert status == 201, answer


async def test_api_plugin_modules_is_configurable(live: LiveFactory,
                                                  outside_module: tuple[str, Path]) -> None:
    module, imported = outside_module
    api = (await live(api={"plugin_modules": [module]})).api
    status, body = await api.call("POST", "/v1/jobs",
                                  {"id": "e", "throttler": {"plugin": f"{module}:Throttle"}})
    assert status == 201, body
    assert imported.exists()
    status, body = await api.call("POST", "/v1/jobs",
                                  {"id": "p", "throttler": {"plugin": "hipq.contrib.throttlers:X"}})
    assert (status, body["error"]["code"]) == (422, "plugin_not_allowed")


# -- finding 6: ids "." and ".." ---------------------------------------------------


async def test_dot_ids_are_refused(live: LiveFactory, downstream: Downstream) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", http_queue("q", downstream.url)))[0] == 201
    for job_id in (".", ".."):
        for encoded in (job_id, job_id.replace(".", "%2E")):
            url = URL(f"{api.base}/v1/jobs/q/{encoded}", encoded=True)
            async with api.session.put(url, json={"data": {}},
                                       headers={"Authorization": f"Bearer {ADMIN}"}) as answer:
                assert answer.status in {404, 405, 422}, (encoded, await answer.text())
    status, body = await api.call("POST", "/v1/jobs/q/batch", {"jobs": [
        {"id": "..", "data": {}}, {"id": ".", "data": {}}, {"id": "fine", "data": {}}]})
    assert status == 200
    assert [j["status"] for j in body["jobs"]] == ["invalid", "invalid", "created"]
    await downstream.wait_for(1)
    assert [r["id"] for r in downstream.received] == ["fine"]
    for queue_id in (".", ".."):
        status, body = await api.call("POST", "/v1/jobs", {"id": queue_id})
        assert status == 422, body


# -- findings 7 and 8: depth, non-finite and out-of-range numbers ------------------


async def test_deep_data_is_refused_at_the_door_and_64_levels_work(live: LiveFactory) -> None:
    api = (await live()).api
    greet = "hipq.contrib.example_targets:greet"
    await api.call("POST", "/v1/jobs", {"id": "q", "attempts": 1,
                                        "target": {"kind": "python", "function": greet}})
    for depth in (65, 300, 480):
        status, body = await api.call("PUT", "/v1/jobs/q/deep", {"data": nested(depth)})
        assert status == 422, (depth, body)
        assert (await api.call("GET", "/v1/jobs/q/deep"))[0] == 404
    status, body = await api.call("PUT", "/v1/jobs/q/ok", {"data": nested(64)})
    assert status == 201, body
    job = await api.wait_job("q", "ok", "succeeded", "failed")
    assert job["data"] == nested(64)
    status, page = await api.call("GET", "/v1/archived-jobs?name=q")
    assert status == 200, page
    assert [j["id"] for j in page["jobs"]] == ["ok"]


@pytest.mark.parametrize("raw", [b'{"data": {"x": 1e400}}', b'{"data": {"x": -1e400}}',
                                 b'{"data": {"x": NaN}}', b'{"data": {"x": Infinity}}',
                                 b'{"data": {"x": 9223372036854775808}}',
                                 b'{"data": {"x": -9223372036854775809}}',
                                 b'{"data": {"x": "a\\u0000b"}}'])
async def test_unstorable_numbers_are_refused_with_422(live: LiveFactory, raw: bytes) -> None:
    api = (await live()).api
    await api.call("POST", "/v1/jobs", {"id": "q"})
    status, body = await _raw(api, "PUT", "/v1/jobs/q/j", raw, "application/json")
    assert status == 422, body
    assert (await api.call("GET", "/v1/jobs/q/j"))[0] == 404


async def test_a_bad_batch_item_is_invalid_and_the_others_are_stored(live: LiveFactory) -> None:
    api = (await live()).api
    await api.call("POST", "/v1/jobs", {"id": "q"})
    raw = (b'{"jobs": [{"id": "a", "data": {"x": 1e400}}, {"id": "b", "data": {"n": 1}},'
           b' {"id": "c", "data": {"x": NaN}}, {"id": "d", "data": ' +
           str(nested(70)).replace("'", '"').encode() + b'},'
           b' {"id": "e", "data": {"x": 99999999999999999999}}, {"id": "f"},'
           b' {"id": "g\\ud800"}]}')  # a lone surrogate: echoed escaped, never a 500
    status, body = await _raw(api, "POST", "/v1/jobs/q/batch", raw, "application/json")
    assert status == 200, body
    assert [j["status"] for j in body["jobs"]] == ["invalid", "created", "invalid", "invalid",
                                                   "invalid", "created", "invalid"]
    assert body["jobs"][-1]["id"] == "g\ud800"
    for job_id, stored in (("a", False), ("b", True), ("c", False), ("d", False),
                           ("e", False), ("f", True)):
        assert (await api.call("GET", f"/v1/jobs/q/{job_id}"))[0] == (200 if stored else 404)


async def test_responses_with_unstorable_values_are_refused(live: LiveFactory,
                                                            downstream: Downstream) -> None:
    lv = await live()
    api = lv.api
    queue = http_queue("q", downstream.url,
                       correlation={"request": "{data.order}", "response": "{body.order}"})
    assert (await api.call("POST", "/v1/jobs", queue))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/q/j", {"data": {"order": "o1"}}))[0] == 201
    await downstream.wait_for(1)
    callback = downstream.received[0]["callback_url"]
    bad_results = [b'{"result": {"x": 1e400}}', b'{"result": {"x": NaN}}',
                   b'{"result": ' + str(nested(70)).replace("'", '"').encode() + b'}',
                   b'{"result": "\\u0000"}']
    for raw in bad_results:
        for path in (callback, f"{api.base}/v1/jobs/q/j"):
            body = raw if path == callback else raw[:-1] + b', "attempt": 1}'
            async with api.session.post(path, data=body, headers={
                    "Content-Type": "application/json",
                    "Authorization": f"Bearer {ADMIN}"}) as answer:
                assert answer.status == 422, (path, raw, await answer.text())
    for raw in (b'{"order": "o1", "attempt": 3000000000}', b'{"order": "o1", "x": 1e400}'):
        status, body = await _raw(api, "POST", "/v1/inbox/q", raw, "application/json")
        assert status == 422, (raw, body)
    status, stats = await api.call("GET", "/v1/stats")
    assert sum(stats["responses"].values()) == 0  # nothing reached the inbox
    assert (await api.job("q", "j"))["status"] == "running"
    # a signed URL for a huge attempt is refused too (never a 500)
    url = Signer(SIGNING_KEY).callback_url(api.base, "k", 2**40, "tok")
    status, _ = await api.call("POST", url, {}, token=None)
    assert status in {401, 422}


async def test_enqueue_timezone_is_checked_without_time_windows(live: LiveFactory) -> None:
    api = (await live()).api
    await api.call("POST", "/v1/jobs", {"id": "q"})
    status, body = await api.call("PUT", "/v1/jobs/q/j", {"timezone": "Mars/Olympus"})
    assert status == 422, body
    assert (await api.call("GET", "/v1/jobs/q/j"))[0] == 404
    status, body = await api.call("PUT", "/v1/jobs/q/j", {"timezone": "Europe/Paris"})
    assert status == 201, body


@pytest.mark.parametrize("when", ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"])
async def test_times_out_of_range_in_utc_are_refused(live: LiveFactory, when: str) -> None:
    api = (await live()).api
    await api.call("POST", "/v1/jobs", {"id": "q"})
    for field in ("run_after", "expires_at"):
        status, body = await api.call("PUT", "/v1/jobs/q/j", {field: when})
        assert status == 422, (field, body)

"""Bad input never gets a 500: the right 4xx with the error shape of docs/http-api.md."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Api, LiveFactory


def _error(status: int, body: Any, expected: int, code: str | None = None) -> None:
    assert status == expected, body
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    if code is not None:
        assert body["error"]["code"] == code, body


async def _api(live: LiveFactory) -> Api:
    api = (await live(api={"max_body_bytes": 4096})).api
    assert (await api.call("POST", "/v1/jobs", {"id": "q"}))[0] == 201
    return api


async def test_malformed_and_invalid_bodies(live: LiveFactory) -> None:
    api = await _api(live)
    cases: list[tuple[str, str, Any, bytes | None, int, str]] = [
        ("PUT", "/v1/jobs/q/a", None, b"{not json", 400, "invalid_json"),
        ("PUT", "/v1/jobs/q/a", None, b'{"data": {"x": NaN}}', 422, "invalid_request"),
        ("PUT", "/v1/jobs/q/a", None, b"[" * 100_0 + b"]" * 100_0, 400, "invalid_json"),
        ("PUT", "/v1/jobs/q/a", {"data": [1, 2]}, None, 422, "invalid_request"),
        ("PUT", "/v1/jobs/q/a", {"data": "text"}, None, 422, "invalid_request"),
        ("PUT", "/v1/jobs/q/a", [1], None, 422, "invalid_request"),
        ("PUT", "/v1/jobs/q/a", {"priority": "high"}, None, 422, "invalid_request"),
        ("PUT", "/v1/jobs/q/a", {"run_after": "yesterday"}, None, 422, "invalid_request"),
        ("PUT", "/v1/jobs/q/a", {"run_after": "2026-01-01T00:00:00"}, None, 422,
         "invalid_request"),
        ("PUT", "/v1/jobs/q/a", {"surprise": 1}, None, 422, "invalid_request"),
        ("PUT", "/v1/jobs/q/a", {"data": {"s": "nul\u0000"}}, None, 422, "invalid_request"),
        ("PUT", "/v1/jobs/q/bad%20id", {}, None, 422, "invalid"),
        ("PUT", "/v1/jobs/q/" + "x" * 201, {}, None, 422, "invalid"),
        ("GET", "/v1/jobs/q/bad%20id", None, None, 422, "invalid_id"),
        ("PUT", "/v1/jobs/q/newline%0A", {}, None, 422, "invalid"),  # "$" before a final \n
        ("GET", "/v1/jobs/q%0A/a", None, None, 422, "invalid_id"),
        ("POST", "/v1/jobs", {"id": "q2", "attempts": 0}, None, 422, "invalid_request"),
        ("POST", "/v1/jobs", {"id": "q2", "colour": "red"}, None, 422, "invalid_request"),
        ("POST", "/v1/jobs", {"id": "q2", "retry": {"plugin": "plugins.nope:x"}}, None, 422,
         "invalid"),
        ("POST", "/v1/jobs/q/batch", {"jobs": "all"}, None, 422, "invalid_request"),
        ("POST", "/v1/jobs/q/a", {"status": "maybe", "attempt": 1}, None, 422,
         "invalid_request"),
        ("GET", "/v1/archived-jobs?limit=0", None, None, 422, "invalid_request"),
        ("GET", "/v1/archived-jobs?limit=ten", None, None, 422, "invalid_request"),
        ("GET", "/v1/archived-jobs?surprise=1", None, None, 422, "invalid_request"),
    ]
    for method, path, body, raw, expected, code in cases:
        status, answer = await api.call(method, path, body, raw=raw,
                                        headers={"Content-Type": "application/json"})
        _error(status, answer, expected, code)


async def test_batch_items_with_bad_ids_are_invalid_one_by_one(live: LiveFactory) -> None:
    api = await _api(live)
    items = [{"id": "ok"}, {"id": "newline\n"}, {"id": "bad id"}, {"id": "x" * 201},
             {"id": 5}, {"data": {}}, {"id": "ok-2", "data": {"n": 1}}]
    status, answer = await api.call("POST", "/v1/jobs/q/batch", {"jobs": items})
    assert status == 200, answer
    assert [j["status"] for j in answer["jobs"]] == [
        "created", "invalid", "invalid", "invalid", "invalid", "invalid", "created"]
    assert (await api.call("GET", "/v1/jobs/q/newline%0A"))[0] == 422


async def test_unknown_things_are_404(live: LiveFactory) -> None:
    api = await _api(live)
    for method, path, body in [("PUT", "/v1/jobs/nope/a", {}), ("GET", "/v1/jobs/nope", None),
                               ("GET", "/v1/jobs/q/missing", None),
                               ("DELETE", "/v1/jobs/q/missing", None),
                               ("POST", "/v1/jobs/q/missing/replay", None),
                               ("POST", "/v1/jobs/nope/pause", None),
                               ("POST", "/v1/jobs/nope/batch", {"jobs": []}),
                               ("GET", "/v2/whatever", None)]:
        status, answer = await api.call(method, path, body)
        _error(status, answer, 404)
    status, answer = await api.call("PATCH", "/v1/jobs")
    _error(status, answer, 405, "method_not_allowed")


async def test_oversized_body_is_413(live: LiveFactory) -> None:
    api = await _api(live)
    big = {"data": {"blob": "x" * 5000}}
    status, answer = await api.call("PUT", "/v1/jobs/q/big", big)
    _error(status, answer, 413, "body_too_large")
    status, answer = await api.call("POST", "/v1/jobs/q/batch",
                                    {"jobs": [{"id": f"j{i}"} for i in range(1000)]})
    _error(status, answer, 413, "body_too_large")
    assert (await api.call("GET", "/v1/jobs/q/big"))[0] == 404

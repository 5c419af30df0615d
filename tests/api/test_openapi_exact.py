"""Where ``/openapi.json`` and the API disagreed (issue 27), one test each: 405 with
``Allow`` listing the path's own methods, a request line over 8 KiB answered as JSON,
``0`` refused where the document says boolean, and cursors: every cursor the
document allows is a position, any other is a 400."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import pytest
import requests

from hipq.api.app import openapi_document
from tests.api.conftest import ADMIN
from tests.api.test_schemathesis import ApiThread

AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def api_url(db_url: str) -> Iterator[str]:
    with ApiThread(db_url) as api:
        url = f"http://127.0.0.1:{api.port}"
        answer = requests.post(f"{url}/v1/jobs", json={"id": "q"}, headers=AUTH, timeout=10)
        assert answer.status_code == 201, answer.text
        yield url


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("OPTIONS", "/v1/jobs/q/pause", "POST"),
    ("GET", "/v1/jobs/q/resume", "POST"),
    ("PUT", "/v1/jobs/q/batch", "POST"),
    ("PATCH", "/v1/jobs/q/j1", "DELETE,GET,POST,PUT"),
    ("DELETE", "/v1/stats", "GET"),
])
def test_405_names_the_paths_own_methods(api_url: str, method: str, path: str,
                                         allow: str) -> None:
    answer = requests.request(method, api_url + path, headers=AUTH, timeout=10)
    assert answer.status_code == 405
    assert answer.headers["Allow"] == allow
    assert answer.json()["error"]["code"] == "method_not_allowed"


def test_a_request_line_over_8_kib_is_answered_as_json(api_url: str) -> None:
    host, port = api_url.removeprefix("http://").split(":")
    line = f"GET /v1/archived-jobs?cursor={'0' * 9000} HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(line.encode())
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.")
    assert b" 400 " in head.split(b"\r\n")[0]
    assert b"content-type: application/json" in head.lower()
    assert b'"line_too_long"' in body
    assert b"0000" not in body  # the request is not echoed


@pytest.mark.parametrize(("method", "path", "body"), [
    ("PUT", "/v1/jobs/q/j0", {"critical": 0}),
    ("PUT", "/v1/jobs/q/j1", {"critical": "true"}),
    ("PUT", "/v1/jobs/q/j2", {"priority": "5"}),
    ("POST", "/v1/jobs", {"id": "p0", "paused": 0}),
    ("POST", "/v1/jobs", {"id": "p1", "merge_by_ordering_key": 1}),
])
def test_a_value_of_another_json_type_is_refused(api_url: str, method: str, path: str,
                                                 body: dict[str, object]) -> None:
    answer = requests.request(method, api_url + path, json=body, headers=AUTH, timeout=10)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"][0]["type"] == "json_type"


def test_a_batch_item_of_another_json_type_is_invalid_alone(api_url: str) -> None:
    body = {"jobs": [{"id": "b0", "critical": 0}, {"id": "b1", "critical": True}]}
    answer = requests.post(f"{api_url}/v1/jobs/q/batch", json=body, headers=AUTH, timeout=10)
    assert [j["status"] for j in answer.json()["jobs"]] == ["invalid", "created"]


@pytest.mark.parametrize("path", ["/v1/archived-jobs", "/v1/queued-jobs?name=q&",
                                  "/v1/responses", "/v1/intake"])
def test_cursors_the_document_allows_are_positions(api_url: str, path: str) -> None:
    sep = "" if path.endswith("&") else "?"
    params = openapi_document()["paths"][path.split("?")[0]]["get"]["parameters"]
    pattern = next(p for p in params if p["name"] == "cursor")["schema"]["pattern"]
    for cursor in ["0~0~0", "999999999999999999~-2147483649~x", "0~0",
                   "999999999999999999~999999999999999999", "1~a~b"]:
        url = f"{api_url}{path}{sep}cursor={cursor}&limit=1000"
        answer = requests.get(url, headers=AUTH, timeout=10)
        expected = 200 if re.fullmatch(pattern, cursor) else 400
        assert answer.status_code == expected, (cursor, answer.text)
    for bad in ["", "000", "W10"]:
        answer = requests.get(f"{api_url}{path}{sep}cursor={bad}", headers=AUTH, timeout=10)
        assert (answer.status_code, answer.json()["error"]["code"]) == (400, "invalid_cursor")


def test_a_cursor_given_out_leads_to_the_next_page(api_url: str) -> None:
    for n in range(3):
        requests.put(f"{api_url}/v1/jobs/q/k{n}", json={}, headers=AUTH, timeout=10)
    seen: list[str] = []
    cursor = None
    while True:
        query = "" if cursor is None else f"&cursor={cursor}"
        page = requests.get(f"{api_url}/v1/queued-jobs?name=q&limit=1{query}",
                            headers=AUTH, timeout=10).json()
        seen += [j["id"] for j in page["jobs"]]
        if (cursor := page["next_cursor"]) is None:
            break
    assert sorted(seen) == ["k0", "k1", "k2"]

"""Fuzzing the HTTP API's bodies (issue 13): hostile JSON (deep, non-finite, huge
integers, NUL characters, lone surrogates, wrong shapes) under every content type
a client may send, on SQLite and PostgreSQL. Whatever comes in, no answer is a 5xx
and a refused request stores nothing. Derandomized and bounded, like the
schemathesis run (the same API-in-a-thread, over a real socket)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import requests
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from hipq.responses.signing import Signer
from tests.api.conftest import ADMIN
from tests.api.test_schemathesis import ApiThread

THREAD_SIGNING_KEY = "k"  # what ApiThread signs with

EXAMPLES = 80
SETTINGS = hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None,
                               derandomize=True, suppress_health_check=list(HealthCheck))
AUTH = {"Authorization": f"Bearer {ADMIN}"}
CONTENT_TYPES = [None, "application/json", "text/plain", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=x", "application/octet-stream"]


def _ids_without_zero() -> Iterator[int]:
    """Numbers for the ids sent in bodies. None has a "0": mangle 1 turns the body's
    first "0" into 1e400, which must hit a value (or nothing), never the id: a queue
    "q950" sent as "q951e400" is another queue, rightly created under that name."""
    return (n for n in itertools.count(1) if "0" not in str(n))


_ids = _ids_without_zero()

INF = "__1e400__"  # a marker encode() turns into the number 1e400 (inf once parsed)
scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.sampled_from([2**31, 3_000_000_000, 2**63, -(2**63) - 1])
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(max_size=6) | st.sampled_from(["\x00", "\ud800", "..", "***", INF, INF]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=12)


@st.composite
def deep(draw: st.DrawFn) -> Any:
    value: Any = draw(scalars)
    for _ in range(draw(st.integers(1, 3) | st.integers(60, 70) | st.integers(250, 600))):
        value = {"a": value} if draw(st.booleans()) else [value]
    return value


payloads = values | deep()
# mostly well-formed bodies with a hostile value inside: a body wrong everywhere is
# refused by its first field and never reaches the deeper checks
data = st.dictionaries(st.text(max_size=4), payloads, max_size=3)
other_fields = st.fixed_dictionaries({}, optional={
    "priority": scalars, "weight": scalars, "timezone": st.text(max_size=12),
    "run_after": st.sampled_from(["9999-12-31T23:59:59-14:00", "2026-01-01T00:00:00Z", "x"]),
    "expires_at": scalars, "correlation_key": scalars, "ordering_key": scalars,
    "timeout_seconds": scalars, "time_windows": values, "critical": scalars})
enqueue_fields = (st.fixed_dictionaries({"data": data})
                  | st.builds(lambda d, o: {"data": d, **o}, data, other_fields))


def encode(value: Any, mangle: int) -> bytes:
    text = json.dumps(value, allow_nan=True).replace(f'"{INF}"', "1e400")
    if mangle == 1:
        text = text.replace("0", "1e400", 1)
    elif mangle == 2:
        text = text[: max(len(text) // 2, 1)]
    return text.encode("utf-8", "surrogatepass")


@pytest.fixture
def api_url(db_url: str) -> Iterator[str]:
    with ApiThread(db_url) as api:
        url = f"http://127.0.0.1:{api.port}"
        for queue in ({"id": "q"}, {"id": "r", "correlation": {"response": "k-{body.k}"}}):
            answer = requests.post(f"{url}/v1/jobs", json=queue, headers=AUTH, timeout=10)
            assert answer.status_code == 201, answer.text
        yield url


def send(url: str, method: str, path: str, body: bytes, content_type: str | None
         ) -> requests.Response:
    headers = dict(AUTH)
    if content_type is not None:
        headers["Content-Type"] = content_type
    return requests.request(method, url + path, data=body, headers=headers, timeout=30)


def exists(url: str, path: str) -> bool:
    answer = requests.get(url + path, headers=AUTH, timeout=10)
    assert answer.status_code in {200, 404}, answer.text
    return answer.status_code == 200


def test_enqueue_bodies(api_url: str) -> None:
    @given(fields=enqueue_fields, mangle=st.integers(0, 2),
           content_type=st.sampled_from(CONTENT_TYPES))
    @SETTINGS
    def check(fields: dict[str, Any], mangle: int, content_type: str | None) -> None:
        job_id = f"j{next(_ids)}"
        answer = send(api_url, "PUT", f"/v1/jobs/q/{job_id}", encode(fields, mangle),
                      content_type)
        assert answer.status_code < 500, answer.text
        assert "Traceback" not in answer.text
        if answer.status_code >= 400:
            assert not exists(api_url, f"/v1/jobs/q/{job_id}")
        else:
            assert exists(api_url, f"/v1/jobs/q/{job_id}")

    check()


def test_batch_bodies(api_url: str) -> None:
    @given(items=st.lists(enqueue_fields, min_size=1, max_size=4), mangle=st.integers(0, 2),
           content_type=st.sampled_from(CONTENT_TYPES[:3]))
    @SETTINGS
    def check(items: list[dict[str, Any]], mangle: int, content_type: str | None) -> None:
        ids = [f"b{next(_ids)}" for _ in items]
        body = {"jobs": [{"id": i, **fields} for i, fields in zip(ids, items, strict=True)]}
        answer = send(api_url, "POST", "/v1/jobs/q/batch", encode(body, mangle), content_type)
        assert answer.status_code < 500, answer.text
        if answer.status_code != 200:
            assert not any(exists(api_url, f"/v1/jobs/q/{i}") for i in ids)
            return
        for result in answer.json()["jobs"]:
            stored = exists(api_url, f"/v1/jobs/q/{result['id']}") if result["id"] else False
            if result["status"] in {"created", "invalid"}:  # (a conflict may hit a stored id)
                assert stored == (result["status"] == "created"), result

    check()


def test_queue_bodies(api_url: str) -> None:
    plugin = st.sampled_from(["os:system", "subprocess:Popen", "hipq.contrib.throttlers:MaxPerTick",
                              "hipq.retry:Fixed", "builtins:eval"])
    queue = st.fixed_dictionaries({}, optional={
        "attempts": scalars, "concurrency": scalars, "timezone": st.text(max_size=8),
        "timeout_seconds": scalars, "retry": st.fixed_dictionaries(
            {}, optional={"strategy": st.text(max_size=8), "plugin": plugin,
                          "options": values}),
        "throttler": st.fixed_dictionaries({"plugin": plugin}, optional={"options": values}),
        "target": st.fixed_dictionaries({"kind": st.sampled_from(["http", "python", "x"])},
                                        optional={"url": st.text(max_size=8),
                                                  "function": plugin, "headers": values,
                                                  "auth": values})})

    @given(fields=queue, mangle=st.integers(0, 2), content_type=st.sampled_from(CONTENT_TYPES))
    @SETTINGS
    def check(fields: dict[str, Any], mangle: int, content_type: str | None) -> None:
        queue_id = f"q{next(_ids)}"
        answer = send(api_url, "POST", "/v1/jobs", encode({"id": queue_id, **fields}, mangle),
                      content_type)
        assert answer.status_code < 500, answer.text
        assert exists(api_url, f"/v1/jobs/{queue_id}") == (answer.status_code < 400)

    check()


def test_queue_body_mangle_keeps_the_id(api_url: str) -> None:
    """The input test_queue_bodies failed on: mangle 1 renamed queue "q950" to
    "q951e400", hipq created that one (201) and the fuzz looked for "q950"."""
    fields = {"retry": {}, "target": {"kind": "http", "url": "http://example.test/x"}}
    answer = send(api_url, "POST", "/v1/jobs", encode({"id": "q950", **fields}, 1), None)
    assert (answer.status_code, answer.json()["id"]) == (201, "q951e400")
    assert exists(api_url, "/v1/jobs/q951e400")
    assert not exists(api_url, "/v1/jobs/q950")
    numbers = list(itertools.islice(_ids_without_zero(), 1000))
    assert all(json.loads(encode({"id": f"q{n}", **fields}, 1))["id"] == f"q{n}"
               for n in numbers)
    queue_id = f"q{numbers[949]}"
    answer = send(api_url, "POST", "/v1/jobs", encode({"id": queue_id, **fields}, 1), None)
    assert answer.status_code == 201, answer.text
    assert exists(api_url, f"/v1/jobs/{queue_id}")


def test_response_bodies(api_url: str) -> None:
    response = st.fixed_dictionaries({"k": st.sampled_from(["a", "b"])}, optional={
        "status": st.sampled_from(["succeeded", "failed", "running", "x"]),
        "attempt": st.integers(1, 3) | scalars,
        "retryable": scalars, "result": payloads, "error": payloads,
        "extend_seconds": scalars})
    signed = Signer(THREAD_SIGNING_KEY).callback_url("", "k-a", 1, "tok")

    @given(fields=response, mangle=st.integers(0, 2), content_type=st.sampled_from(CONTENT_TYPES),
           path=st.sampled_from(["/v1/jobs/q/none", "/v1/inbox/r", "/v1/inbox/r/tail",
                                 "/v1/responses/k?attempt=1&sig=x", signed]))
    @SETTINGS
    def check(fields: dict[str, Any], mangle: int, content_type: str | None, path: str) -> None:
        before = _inbox(api_url)
        answer = send(api_url, "POST", path, encode(fields, mangle), content_type)
        assert answer.status_code < 500, answer.text
        if answer.status_code >= 400:
            assert _inbox(api_url) == before  # a refused response stores nothing

    check()


def _inbox(url: str) -> int:
    stats = requests.get(f"{url}/v1/stats", headers=AUTH, timeout=10).json()
    return sum(stats["responses"].values())

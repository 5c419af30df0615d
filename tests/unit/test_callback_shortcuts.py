"""The callback path's shortcuts of issue 28 say exactly what the general code says:
the HMAC with its pads hashed once, a signed URL's query read by a regex, the 202
answer written without its model, the dedup digest without ``model_dump``, a header
block checked by the regex engine, and the inbox rows of a write built in memory."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import pytest
from aiohttp.test_utils import make_mocked_request
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from hipq.api.api_errors import ApiError
from hipq.api.handlers import _accepted, _callback_query
from hipq.api.io import read_query, reply
from hipq.api.models import AcceptedOut, CallbackQuery
from hipq.bodies import ResponseRequest
from hipq.responses.signing import Signer
from hipq.service import response_digest
from hipq.store.records import InboxRow, Response, written_rows
from hipq.targets.http_pool import header_block

texts = st.one_of(st.text(max_size=30), st.text(alphabet="abcXYZ019-._~:/ ?&=%+", max_size=30))


@pytest.mark.parametrize("key", ["k", "x" * 63, "y" * 64, "z" * 65, "é" * 100, "0" * 200])
@given(message=st.tuples(texts, st.integers(min_value=1, max_value=2**31), texts))
def test_the_signature_is_hmac_sha256(key: str, message: tuple[str, int, str]) -> None:
    correlation_key, attempt, token = message
    expected = hmac.new(key.encode(), f"{attempt}\n{token}\n{correlation_key}".encode(),
                        hashlib.sha256).hexdigest()
    assert Signer(key).sign(correlation_key, attempt, token) == expected


def _general(query: dict[str, str] | str) -> Any:
    """What the handler did before issue 28: the model over the parsed query."""
    text = query if isinstance(query, str) else urlencode(query)
    try:
        parsed = read_query(make_mocked_request("POST", f"/v1/responses/k?{text}"),
                            CallbackQuery)
    except ValidationError:
        return 401
    except ApiError as exc:
        return exc.status
    return parsed.attempt, parsed.t, parsed.sig


def _fast(query: dict[str, str] | str) -> Any:
    text = query if isinstance(query, str) else urlencode(query)
    try:
        return _callback_query(make_mocked_request("POST", f"/v1/responses/k?{text}"))
    except ApiError as exc:
        return exc.status


attempts = st.one_of(st.integers(min_value=-2, max_value=1_000_002).map(str),
                     st.sampled_from(["01", "1e3", "", " 1", "1000000", "999999", "0"]))


@given(attempt=attempts, token=texts, sig=st.one_of(texts, st.just("ab" * 32)))
def test_a_signed_query_reads_as_the_model_reads_it(attempt: str, token: str,
                                                     sig: str) -> None:
    query = {"attempt": attempt, "t": token, "sig": sig}
    assert _fast(query) == _general(query)


@pytest.mark.parametrize("text", [
    "attempt=1&t=tok&sig=ab", "t=tok&attempt=1&sig=ab", "attempt=1&t=tok&sig=ab&x=1",
    "attempt=1&t=tok", "attempt=1&attempt=2&t=tok&sig=ab", "attempt=1&t=t%00k&sig=ab",
    "attempt=1&t=" + "a" * 201 + "&sig=ab", "attempt=1&t=a+b&sig=ab", "attempt=1&t=&sig=ab",
    "attempt=1000001&t=tok&sig=ab", "attempt=%31&t=tok&sig=ab", "attempt=1&t=tok&sig=AB"])
def test_odd_queries_read_as_the_model_reads_them(text: str) -> None:
    assert _fast(text) == _general(text)


@pytest.mark.parametrize("key", ["~tok.1", "o1:2", "a b", "é", 'x"y', "a\\b", "\x01", ""])
@pytest.mark.parametrize("duplicate", [True, False])
def test_the_accepted_answer_is_the_models(key: str, duplicate: bool) -> None:
    fast, general = _accepted(duplicate, key), reply(
        AcceptedOut(duplicate=duplicate, correlation_key=key), 202)
    assert (fast.status, fast.content_type) == (general.status, general.content_type)
    assert _bytes(fast.body) == _bytes(general.body)


def _bytes(body: Any) -> bytes:
    value = getattr(body, "_value", body)  # a payload's, or the bytes themselves
    return value.encode() if isinstance(value, str) else bytes(value)


storable = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
                   max_size=5)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**53, max_value=2**53),
              st.floats(allow_nan=False, allow_infinity=False), storable),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(storable, inner, max_size=3)),
    max_leaves=8)


@given(status=st.sampled_from(["succeeded", "failed", "running", "throttled"]),
       result=json_values, error=json_values, retryable=st.one_of(st.none(), st.booleans()),
       attempt=st.one_of(st.none(), st.integers(min_value=1, max_value=9)),
       given_attempt=st.one_of(st.none(), st.integers(min_value=1, max_value=9)),
       seconds=st.one_of(st.none(), st.floats(min_value=0.5, max_value=100)))
def test_the_dedup_digest_is_the_model_dumps(status: str, result: Any, error: Any,
                                              retryable: bool | None, attempt: int | None,
                                              given_attempt: int | None,
                                              seconds: float | None) -> None:
    response = ResponseRequest(status=status, result=result, error=error, retryable=retryable,
                               attempt=attempt, extend_seconds=seconds,
                               retry_after_seconds=seconds)
    reference = response if given_attempt is None else response.model_copy(
        update={"attempt": given_attempt})
    body = json.dumps(["~k.1", reference.model_dump(mode="json")], sort_keys=True,
                      separators=(",", ":"), default=str)
    assert response_digest("~k.1", response, attempt=given_attempt) == hashlib.sha256(
        body.encode()).hexdigest()


def _reference_block(headers: list[tuple[str, str]]) -> bytes | str:
    lines = []
    for name, value in headers:
        if not name or not all(c.isascii() and (c.isalnum() or c in "!#$%&'*+-.^_`|~")
                               for c in name):
            return "refused"
        if any(c in value for c in "\r\n\x00"):
            return "refused"
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode()


@given(name=st.one_of(st.text(max_size=8), st.sampled_from(["Hipq-Correlation-Key", "X_1"])),
       value=st.text(max_size=12))
def test_a_header_block_is_checked_as_before(name: str, value: str) -> None:
    try:
        block: bytes | str = header_block([(name, value)])
    except ValueError:
        block = "refused"
    assert block == _reference_block([(name, value)])


def test_the_rows_written_are_those_a_read_would_give() -> None:
    now = datetime(2026, 11, 27, tzinfo=UTC)
    responses = [Response(correlation_key="a", attempt=1, result={"n": 1}, source="http",
                          dedup_key="d1", token="t1"),
                 Response(correlation_key="b", status="running", extend_seconds=5.0,
                          dedup_key="d2"),
                 Response(correlation_key="c", status="failed", retryable=False,
                          error={"e": 1})]
    assert written_rows(responses, [7, None, 9], now) == [
        InboxRow(id=7, correlation_key="a", attempt=1, status="succeeded", retryable=None,
                 result={"n": 1}, error=None, extend_seconds=None, source="http",
                 received_at=now, token="t1"),
        InboxRow(id=9, correlation_key="c", attempt=None, status="failed", retryable=False,
                 result=None, error={"e": 1}, extend_seconds=None, source="api",
                 received_at=now, token=None)]

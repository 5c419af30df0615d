"""The shortcuts of issue 28 say exactly what the general code says: a signed callback
URL built without ``urlencode`` (and without ``quote`` for plain keys and tokens), and
a correlation template rendered from its compiled parts with plain dicts and strings
looked up directly."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any
from urllib.parse import quote, urlencode

from hypothesis import given
from hypothesis import strategies as st

from hipq.responses import correlation
from hipq.responses.signing import Signer

SIGNER = Signer("k" * 64)
texts = st.one_of(st.text(max_size=30),
                  st.text(alphabet="abcXYZ019-._~:/ ?&=%+", max_size=30))


def _reference_url(public_url: str, key: str, attempt: int, token: str) -> str:
    sig = hmac.new(b"k" * 64, f"{attempt}\n{token}\n{key}".encode(), hashlib.sha256).hexdigest()
    query = urlencode({"attempt": attempt, "t": token, "sig": sig})
    return f"{public_url.rstrip('/')}/v1/responses/{quote(key, safe='')}?{query}"


@given(key=texts, token=texts, attempt=st.integers(min_value=1, max_value=2**31 - 1))
def test_the_callback_url_is_the_urlencoded_one(key: str, token: str, attempt: int) -> None:
    for public in ("http://127.0.0.1:8080", "https://hipq.example/base/"):
        assert SIGNER.callback_url(public, key, attempt, token) == _reference_url(
            public, key, attempt, token)


def _reference_render(template: str, scope: Any) -> Any:
    try:
        return correlation._checked(correlation._FIELD.sub(
            lambda m: correlation.field(m.group(1), scope), template))
    except correlation.TemplateError as exc:
        return ("error", str(exc))


def _render(template: str, scope: Any) -> Any:
    try:
        return correlation.render(template, scope)
    except correlation.TemplateError as exc:
        return ("error", str(exc))


values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
              st.text(max_size=5)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(["a", "b", "0", "1"]), inner,
                                            max_size=3)),
    max_leaves=8)
templates = st.lists(st.one_of(st.sampled_from(["{value.a}", "{value.b.a}", "{value.0}",
                                                "{value.a.1}", "{key}", "{headers.a}"]),
                               st.text(alphabet="x:-{}", max_size=3)),
                     max_size=4).map("".join)


@given(template=templates, value=values, key=st.one_of(st.none(), st.text(max_size=4)))
def test_a_template_renders_as_the_general_lookup_does(template: str, value: Any,
                                                       key: str | None) -> None:
    scope = {"key": key, "value": value, "headers": {"a": "h"}}
    assert _render(template, scope) == _reference_render(template, scope)

"""``/openapi.json`` is made at its first request, not when the daemon starts: a
daemon that is never asked for it does not hold it (about 0.7 MB: docs/benchmarks.md,
"Idle memory"). Later requests answer the same document without making it again."""

from __future__ import annotations

from typing import Any

import pytest

from hipq.api import app as app_module
from hipq.api.openapi import build_openapi
from tests.api.conftest import LiveFactory


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_the_document_is_made_once_at_its_first_request(
        live: LiveFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        made.append(1)
        return build_openapi(*args, **kwargs)

    monkeypatch.setattr(app_module, "build_openapi", counted)
    api = (await live()).api
    assert (await api.call("GET", "/healthz", token=None))[0] == 200
    assert made == []
    first = await api.call("GET", "/openapi.json", token=None)
    second = await api.call("GET", "/openapi.json", token=None)
    assert first[0] == 200
    assert first == second
    assert "/v1/jobs/{queue}/{id}" in first[1]["paths"]
    assert made == [1]

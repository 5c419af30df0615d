"""A signed callback for a try the daemon holds in memory is checked there (no read of
the job); one for any other try is checked against the database as before, and a stale
one is still refused with 409 and stores nothing. SQLite and PostgreSQL, a live daemon,
a real downstream on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from hipq.daemon import Daemon
from tests.api.conftest import Downstream, LiveFactory, http_queue


def count_lookups(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Calls of the store's key lookup (the database's view of a callback's job)."""
    calls: list[int] = []
    store = daemon.store
    real = store.job_keys_lookup

    async def counted(keys: Sequence[str]) -> dict[str, Any]:
        calls.append(len(keys))
        return await real(keys)

    monkeypatch.setattr(store, "job_keys_lookup", counted)
    return calls


async def test_a_live_try_is_checked_in_memory_a_stale_one_in_the_database(
        live: LiveFactory, downstream: Downstream, monkeypatch: pytest.MonkeyPatch) -> None:
    lv = await live()
    api = lv.api
    assert (await api.call("POST", "/v1/jobs", http_queue("m", downstream.url)))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/m/j", {}))[0] == 201
    (first,) = await downstream.wait_for(1)
    await api.wait_job("m", "j", "running")
    lookups = count_lookups(lv.daemon, monkeypatch)

    status, body = await api.call("POST", first["callback_url"],
                                  {"status": "failed", "retryable": True}, token=None)
    assert status == 202, body
    assert lookups == []  # the try was in memory
    second = (await downstream.wait_for(2))[1]
    assert second["attempt"] == 2

    status, body = await api.call("POST", first["callback_url"],  # try 1 again: stale
                                  {"status": "succeeded"}, token=None)
    assert status == 409, body
    assert lookups == [1]
    status, body = await api.call("POST", second["callback_url"], {"result": 7}, token=None)
    assert status == 202, body
    done = await api.wait_job("m", "j", "succeeded")
    assert (done["attempt"], done["result"]) == (2, 7)
    counts = (await api.call("GET", "/v1/stats"))[1]["responses"]
    assert counts["stale"] == 0  # the refused one was never stored

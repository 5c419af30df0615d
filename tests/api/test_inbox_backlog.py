"""The daemon runs ticks back to back while step 0 leaves new responses unread
(its bound per tick, ``hipq.engine.inbox``): a backlog another writer left is
applied at once, not a part per periodic tick."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hipq.engine import inbox as inbox_module
from hipq.store import Response
from tests.api.conftest import LiveFactory


async def accept(job: Any, **_: Any) -> Any:
    from hipq.targets import ACCEPTED

    return ACCEPTED  # running: the response comes later, through the inbox


async def test_a_backlog_is_read_in_back_to_back_ticks(
        live: LiveFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inbox_module, "NEW_ROWS_PAGE", 2)  # a tick reads 4 new rows
    monkeypatch.setattr(inbox_module, "NEW_PAGES_PER_TICK", 2)
    queue = {"id": "bk", "target": {"kind": "python",
                                    "function": "tests.api.test_inbox_backlog:accept"}}
    # the periodic tick is far off: only wake-ups (and a tick's "more at once") run ticks
    lv = await live(queues=[queue], reconcile={"interval_seconds": 60})
    ids = [f"j{i:02d}" for i in range(13)]
    status, body = await lv.api.call("POST", "/v1/jobs/bk/batch",
                                     {"jobs": [{"id": i} for i in ids]})
    assert status == 200, body
    keys = [(await lv.api.wait_job("bk", i, "running"))["correlation_key"] for i in ids]
    # written by another daemon, which says so (NOTIFY): read back, not handed over
    await lv.daemon.store.inbox_insert_many(
        [Response(correlation_key=k, result={"n": n}) for n, k in enumerate(keys)],
        now=lv.daemon.clock.now())
    started = time.monotonic()
    lv.daemon._notified("responses")  # what a NOTIFY from another daemon does
    for n, job_id in enumerate(ids):
        job = await lv.api.wait_job("bk", job_id, "succeeded", within=10)
        assert job["result"] == {"n": n}
    # four ticks' reads, back to back (well under a second here); without them, the
    # next reads wait for the periodic tick (60 s) or the lease renewal's (10 s)
    assert time.monotonic() - started < 5

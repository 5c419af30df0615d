"""A history entry's ``error`` is an object or null, whatever a downstream sent and
whatever a row holds (issue 46, finding 11), on SQLite and PostgreSQL.

* The writer: a late response's error is the downstream's own value (any JSON: a
  text, a number, a list); it is recorded as an object, as an applied response's
  would be (a text as its ``detail``, another value as its ``data``).
* The reader: a row written otherwise (by a daemon before this fix, or by hand)
  reads as such an object, never as the bare value, so the job's JSON can show it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hipq.jobs import Job
from hipq.store import Store, open_store
from hipq.store.records import InboxRow
from hipq.testing import FakeClock
from tests.contract.history_rows import stored_errors, write_history_row
from tests.contract.test_store import OWNER, Q, archive, make_job, start

TIMEOUT = {"kind": "timeout", "detail": "no response by then"}

# what a downstream may send as a response's error, and what the history shows of it
SHAPES: list[tuple[Any, dict[str, Any] | None]] = [
    ("boom", {"kind": "response_failed", "detail": "boom"}),
    ("", {"kind": "response_failed", "detail": ""}),
    (7, {"kind": "response_failed", "detail": "", "data": 7}),
    (2.5, {"kind": "response_failed", "detail": "", "data": 2.5}),
    (False, {"kind": "response_failed", "detail": "", "data": False}),
    (["a", {"b": 1}], {"kind": "response_failed", "detail": "", "data": ["a", {"b": 1}]}),
    ({"message": "kept as sent"}, {"message": "kept as sent"}),
    (None, None),
]


async def _failed(store: Store, clock: FakeClock, job_id: str) -> Job:
    """``job_id`` claimed and failed (its try timed out): archived at attempt 1."""
    [job] = await start(store, clock, make_job(clock, job_id))
    change = archive(job, status="failed", error=TIMEOUT)
    assert await store.persist_batch(changes=[change], owner=OWNER,
                                     now=clock.advance(30)) == {(Q, job_id)}
    return job


def _late(key: str, n: int, error: Any, clock: FakeClock) -> InboxRow:
    return InboxRow(id=n, correlation_key=key, attempt=1, status="failed", retryable=None,
                    result=None, error=error, extend_seconds=None, source="http",
                    received_at=clock.now())


@pytest.fixture
async def opened(db_url: str) -> Any:
    store = await open_store(db_url)
    try:
        yield store
    finally:
        await store.close()


async def test_a_late_response_records_its_error_as_an_object(
        db_url: str, opened: Store, clock: FakeClock) -> None:
    job = await _failed(opened, clock, "a")
    key = job.correlation_key or ""
    await opened.attempt_record_late_many(
        [(Q, "a", _late(key, n, sent, clock)) for n, (sent, _) in enumerate(SHAPES)],
        now=clock.advance(1))

    shown = [shown for _, shown in SHAPES]
    assert await stored_errors(db_url, Q, "a") == [TIMEOUT, *shown]
    history = await opened.job_history(Q, "a", limit=50)
    assert [t.outcome for t in history.tries] == ["failed"] + ["late_response"] * len(SHAPES)
    assert [t.error for t in history.tries] == [TIMEOUT, *shown]


async def test_history_rows_holding_any_json_value_read_as_objects(
        db_url: str, opened: Store, clock: FakeClock) -> None:
    """Rows written straight into the table, each ``error`` a bare JSON value."""
    await _failed(opened, clock, "b")
    for sent, _ in SHAPES:
        await write_history_row(db_url, Q, "b", attempt=1, outcome="late_response",
                                error_json=None if sent is None else json.dumps(sent),
                                at=clock.advance(1))
    # JSON's null stored as a value (not SQL NULL) reads as no error too
    await write_history_row(db_url, Q, "b", attempt=1, outcome="late_response",
                            error_json="null", at=clock.advance(1))

    expected = [TIMEOUT, *(shown for _, shown in SHAPES), None]
    history = await opened.job_history(Q, "b", limit=50)
    assert [t.error for t in history.tries] == expected
    assert history.total == len(expected)
    assert [t.error for t in await opened.job_attempts(Q, "b")] == expected

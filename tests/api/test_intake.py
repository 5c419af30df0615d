"""Enqueue from SQL (docs/from-your-database.md) against a live daemon: ``psql`` plays a producer
written in another language, calling ``hipq_enqueue()`` in its own transaction
beside its own rows. PostgreSQL only (SQLite producers: tests/contract/test_sql_enqueue.py
and the watcher test below)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from typing import Any

import pytest

from hipq.store import Store, open_store
from tests.api.conftest import Downstream, LiveFactory, http_queue

pytestmark = pytest.mark.slow


def psql(db_url: str, script: str) -> str:
    """Run ``script`` with psql (ON_ERROR_STOP); its output."""
    url = db_url.replace("postgresql+asyncpg://", "postgresql://", 1)
    done = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-q", "-t", "-A", "-c", script],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def backend() -> str:
    return "postgresql"


@pytest.fixture(autouse=True)
def _pg(request: pytest.FixtureRequest) -> None:
    request.getfixturevalue("pg_template")


async def intake_rows(db_url: str) -> list[tuple[Any, ...]]:
    store = await open_store(db_url)
    try:
        return [(r.queue, r.job_id, r.error) for r in await store.intake_rejected_page(limit=100)]
    finally:
        await store.close()


async def test_a_committed_enqueue_launches_once_and_a_rolled_back_one_never_exists(
        live: LiveFactory, downstream: Downstream, db_url: str) -> None:
    api = (await live(reconcile={"interval_seconds": 5})).api
    assert (await api.call("POST", "/v1/jobs", http_queue("orders", downstream.url)))[0] == 201
    psql(db_url, "CREATE TABLE shop_orders (id text PRIMARY KEY, total int)")
    started = time.monotonic()
    psql(db_url, """BEGIN;
        INSERT INTO shop_orders VALUES ('o1', 42);
        SELECT hipq_enqueue('orders', 'ship-o1', '{"order": "o1"}');
        COMMIT;""")
    launched = await downstream.wait_for(1, within=5)
    assert time.monotonic() - started < 0.5 + 0.4  # woken by the notification (psql start aside)
    assert launched[0]["id"] == "ship-o1"
    assert launched[0]["data"] == {"order": "o1"}
    psql(db_url, """BEGIN;
        INSERT INTO shop_orders VALUES ('o2', 7);
        SELECT hipq_enqueue('orders', 'ship-o2', '{"order": "o2"}');
        ROLLBACK;""")
    await asyncio.sleep(1.0)  # nothing to wait on: the job must not appear
    assert (await api.call("GET", "/v1/jobs/orders/ship-o2"))[0] == 404
    assert psql(db_url, "SELECT count(*) FROM shop_orders").strip() == "1"
    assert len(downstream.received) == 1  # launched once
    assert psql(db_url, "SELECT count(*) FROM job_intake").strip() == "0"


async def test_the_wake_up_comes_within_half_a_second_at_a_5s_interval(
        live: LiveFactory, downstream: Downstream, db_url: str) -> None:
    api = (await live(reconcile={"interval_seconds": 5})).api
    assert (await api.call("POST", "/v1/jobs", http_queue("orders", downstream.url)))[0] == 201
    url = db_url.replace("postgresql+asyncpg://", "postgresql://", 1)
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        # the daemon holds the queue's lease before the clock starts (a tick takes it
        # at once: waited for, not assumed after a fixed sleep)
        deadline = time.monotonic() + 5
        while not await conn.fetchval(
                "SELECT count(*) FROM leases WHERE queue = 'orders' AND expires_at > now()"):
            assert time.monotonic() < deadline, "the daemon never took the queue's lease"
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)  # the tick that took it has ended
        for i in range(3):
            started = time.monotonic()
            async with conn.transaction():
                await conn.execute("SELECT hipq_enqueue('orders', $1)", f"j{i}")
            await downstream.wait_for(i + 1, within=5)
            assert time.monotonic() - started < 0.5
    finally:
        await conn.close()


async def test_rejected_rows_are_kept_with_their_error_and_a_conflict_changes_nothing(
        live: LiveFactory, downstream: Downstream, db_url: str) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", http_queue("orders", downstream.url)))[0] == 201
    psql(db_url, """SELECT hipq_enqueue('orders', 'a', '{"v": 1}');
        SELECT hipq_enqueue('orders', 'a', '{"v": 1}');
        SELECT hipq_enqueue('orders', 'a', '{"v": 2}');
        SELECT hipq_enqueue('orders', '..', '{}');
        SELECT hipq_enqueue('orders', 'w', '{}', NULL, '{"priority": "high"}');
        SELECT hipq_enqueue('orders', 'x', '{}', NULL, '{"colour": "red"}');""")
    await downstream.wait_for(1, within=5)
    deadline = time.monotonic() + 10
    while len(rejected := await intake_rows(db_url)) < 4:
        assert time.monotonic() < deadline, rejected
        await asyncio.sleep(0.1)
    errors = {job_id: error for _, job_id, error in rejected}
    assert set(errors) == {"a", "..", "w", "x"}
    assert errors["a"].startswith("conflict")
    assert "invalid id" in errors[".."]
    assert "priority" in errors["w"]
    assert "colour" in errors["x"]
    job = await api.job("orders", "a")
    assert job["data"] == {"v": 1}  # the conflicting repeat changed nothing
    assert len(downstream.received) == 1


async def test_a_row_for_an_unknown_queue_is_rejected(live: LiveFactory, db_url: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from hipq import intake

    monkeypatch.setattr(intake, "ORPHAN_GRACE", intake.timedelta(seconds=0))
    await live()
    psql(db_url, "SELECT hipq_enqueue('nowhere', 'j', '{}')")
    deadline = time.monotonic() + 10
    while not (rejected := await intake_rows(db_url)):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert rejected == [("nowhere", "j", "unknown queue 'nowhere'")]


async def test_a_job_still_in_the_intake_is_found(live: LiveFactory, db_url: str) -> None:
    lv = await live()
    api = lv.api
    body = {"id": "later", "attempts": 1}  # no target: nothing launches, the owner ingests
    assert (await api.call("POST", "/v1/jobs", body))[0] == 201
    store: Store = await open_store(db_url)
    try:  # straight into the table, as hipq.sql does: no notification
        async with store.engine.begin() as conn:  # type: ignore[attr-defined]
            raw = (await conn.get_raw_connection()).driver_connection
            await raw.execute("INSERT INTO job_intake (queue, job_id, data, fields, enqueued_at) "
                              "VALUES ('later', 'j1', '{\"k\": 1}', '{}', now())")
    finally:
        await store.close()
    status, job = await api.call("GET", "/v1/jobs/later/j1")
    assert status == 200, job
    assert (job["status"], job["data"], job["attempt"]) == ("queued", {"k": 1}, 0)


async def test_a_row_nested_too_deeply_is_rejected_and_the_others_go_on(
        live: LiveFactory, downstream: Downstream, db_url: str) -> None:
    api = (await live()).api
    assert (await api.call("POST", "/v1/jobs", http_queue("orders", downstream.url)))[0] == 201
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    psql(db_url, f"""SELECT hipq_enqueue('orders', 'deep', '{deep}');
        SELECT hipq_enqueue('orders', 'fine', '{{"ok": true}}');""")
    await downstream.wait_for(1, within=10)
    assert downstream.received[0]["id"] == "fine"
    deadline = time.monotonic() + 10
    while not (rejected := await intake_rows(db_url)):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert [(q, j) for q, j, _ in rejected] == [("orders", "deep")]
    assert "deep" in rejected[0][2]


def test_a_batch_and_a_row_alone_make_the_same_request() -> None:
    """Ingestion validates a batch as one JSON document, or row by row when one row
    is bad: a re-ingest after a crash must find the same body (else a conflict)."""
    from datetime import UTC, datetime

    from hipq.intake_rows import request_of, requests_of
    from hipq.store.records import IntakeRow

    now = datetime(2026, 1, 5, 12, tzinfo=UTC)
    rows = [
        IntakeRow(id=1, queue="q", job_id="a", data='{"x": [1, 2.5, "é"]}', run_after=None,
                  fields="{}", enqueued_at=now),
        IntakeRow(id=2, queue="q", job_id=None, data="{}", run_after=now,
                  fields='{"priority": 3, "ordering_key": "k"}', enqueued_at=now),
        IntakeRow(id=3, queue="q", job_id="c", data={"y": {"z": None}}, run_after=None,
                  fields={"critical": True}, enqueued_at=now),
    ]
    together = requests_of(rows)
    for row, (problem, item) in zip(rows, together, strict=True):
        alone_problem, alone = request_of(row)
        assert problem is None
        assert alone_problem is None
        assert item is not None
        assert alone is not None
        assert item[0] == alone[0]
        assert item[1].body_hash() == alone[1].body_hash()
    assert together[1][1] is not None
    assert together[1][1][0] == "intake-2"

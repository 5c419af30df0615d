"""What the API reads of the intake is bounded in bytes, and no stored row breaks a
listing (docs/from-your-database.md, "Limits"), on SQLite and PostgreSQL.

Rows are written by the database's owner straight into the table (no check on the
way). A row over ``api.max_body_bytes`` never becomes a job, so ``GET
/v1/queued-jobs`` never carries it; ``GET /v1/intake`` lists it with its values cut
by the database; a row with a time nobody can read is listed, never a 4xx or 5xx."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.api.conftest import READER, LiveFactory
from tests.api.intake_kit import bare_api
from tests.contract.test_intake_bounds import owner_rows

LIMIT = 20_000


async def _body(api: Any, path: str) -> bytes:
    async with api.session.get(api.base + path,
                               headers={"Authorization": f"Bearer {READER}"}) as answer:
        assert answer.status == 200, await answer.text()
        return bytes(await answer.read())


async def test_rows_over_the_limit_never_become_jobs_and_reads_stay_small(
        live: LiveFactory, db_url: str, backend: str) -> None:
    api = (await live(api={"max_body_bytes": LIMIT})).api
    assert (await api.call("POST", "/v1/jobs", {"id": "q", "attempts": 1}))[0] == 201
    await owner_rows(db_url, backend, [
        {"queue": "q", "job_id": f"big{n}", "data": '{"pad": "%s"}' % ("x" * 60_000)}
        for n in range(4)] + [
        {"queue": "q", "job_id": f"small{n}", "data": '{"pad": "%s"}' % ("y" * 2_000)}
        for n in range(3)])
    deadline = time.monotonic() + 15
    while (await api.call("GET", "/v1/stats"))[1]["intake"] != {"pending": 0, "rejected": 4}:
        assert time.monotonic() < deadline, "the rows were not ingested"
        await asyncio.sleep(0.05)  # polling the API; there is no event to wait on

    listed = await _body(api, "/v1/queued-jobs?name=q&limit=1000")
    assert len(listed) < 3 * 2_500 + 2_000  # the three small jobs, nothing of the big rows
    assert b"big" not in listed
    for n in range(4):
        assert (await api.call("GET", f"/v1/jobs/q/big{n}"))[0] == 404
    rejected = await _body(api, "/v1/intake?limit=1000")
    assert len(rejected) < 4 * 5_000  # each row's data cut to 4,096 characters
    assert rejected.count(b'"truncated":["data"]') == 4
    assert rejected.count(b"over the limit of 20000") == 4


async def test_an_odd_stored_row_never_breaks_the_listing(db_url: str, backend: str) -> None:
    pg = backend == "postgresql"
    at = "2030-01-01 00:00:00+00" if pg else 1_893_456_000.0
    await owner_rows(db_url, backend, [
        {"queue": "q", "job_id": "inf", "run_after": "infinity" if pg else float("inf"),
         "error": "rejected", "rejected_at": at},
        {"queue": "q", "job_id": "far", "run_after": "20000-01-01" if pg else 1e15,
         "enqueued_at": "-infinity" if pg else "yesterday", "error": "rejected",
         "rejected_at": at},
        {"queue": "q", "job_id": "pinned", "error": "pinned",
         "rejected_at": "infinity" if pg else "never"},
        {"queue": "q", "job_id": "plain", "error": "rejected", "rejected_at": at},
    ])
    async with bare_api(db_url) as bare:
        for limit in (1, 2, 100):
            ids: list[str] = []
            cursor = None
            for _ in range(10):
                query = f"/v1/intake?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
                status, page = await bare.api.call("GET", query, token=READER)
                assert status == 200, page
                ids += [row["id"] for row in page["rows"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert sorted(ids) == ["far", "inf", "plain"]  # "pinned" waits for its pruning
        status, page = await bare.api.call("GET", "/v1/intake", token=READER)
        odd = {row["id"]: row for row in page["rows"]}
        assert odd["inf"]["run_after"] is None
        assert (odd["far"]["run_after"], odd["far"]["enqueued_at"]) == (None, None)

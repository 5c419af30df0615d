"""The intake on the dashboard's queues page in a real headless browser
(docs/from-your-database.md): a queue with jobs enqueued from SQL and not ingested yet shows them
beside its queued count, a queue without shows nothing, and a line counts the intake's pending
and rejected rows in all. The API runs alone (no daemon), so the rows stay pending.
No console error may appear (see conftest)."""

from __future__ import annotations

import pytest

from tests.api.conftest import READER
from tests.api.intake_kit import at, bare_api, insert_rejected, produce
from tests.browser.conftest import Page

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


async def test_the_queues_page_shows_the_pending_intake(db_url: str, page: Page) -> None:
    async with bare_api(db_url) as bare:
        for queue in ("orders", "mail"):
            status, body = await bare.api.call("POST", "/v1/jobs", {"id": queue, "attempts": 1})
            assert status == 201, body
        await produce(db_url, "orders", [("o1", {"order": 1}), ("o2", {"order": 2})])
        await insert_rejected(bare.store, [{"queue": "mail", "job_id": "..", "error": "bad id",
                                            "enqueued_at": at(0), "rejected_at": at(1)}])

        p = page.page
        await p.goto(bare.api.base + "/")
        await p.fill("#token", READER)
        await p.click("#login button")
        pending = p.locator('#queues tr[data-queue="orders"] .intake')
        await pending.wait_for()
        assert await pending.inner_text() == "+2 from SQL"
        assert await pending.get_attribute("data-intake") == "2"
        assert await p.locator('#queues tr[data-queue="mail"] .intake').count() == 0
        line = p.locator("#intake")
        assert await line.locator('[data-count="pending"]').inner_text() == "2"
        assert await line.locator('[data-count="rejected"]').inner_text() == "1"
        assert "GET /v1/intake?status=rejected" in await line.inner_text()
        await page.shot("intake")

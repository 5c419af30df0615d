"""The dashboard's unmatched responses in a real headless browser: responses for
keys no job ever had become unmatched (``responses.buffer_seconds: 0``), the count
on the queues page links to their list, which pages with a "more" button. No
console error may appear (see conftest)."""

from __future__ import annotations

import asyncio
import time

import pytest

from hipq.responses.signing import Signer
from tests.api.conftest import READER, SIGNING_KEY, Api, LiveFactory
from tests.browser.conftest import Page

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

GHOSTS = 23  # more than a page of the dashboard (20)


async def _post_ghosts(api: Api) -> None:
    signer = Signer(SIGNING_KEY)
    for i in range(GHOSTS):
        body = {"result": {"order": i}} if i else {"status": "failed",
                                                   "error": {"detail": "z" * 5000}}
        url = signer.callback_url(api.base, f"ghost-order-{i:02d}", 1, "no-such-token")
        status, ack = await api.call("POST", url, body, token=None)
        assert status == 202, ack


async def _wait_unmatched(api: Api) -> None:
    deadline = time.monotonic() + 20
    while True:
        status, body = await api.call("GET", "/v1/stats")
        assert status == 200, body
        if body["responses"]["unmatched"] == GHOSTS:
            return
        assert time.monotonic() < deadline, body["responses"]
        await asyncio.sleep(0.1)  # the sweep runs once a second; nothing to wait on


async def test_unmatched_responses_are_listed(live: LiveFactory, page: Page) -> None:
    lv = await live(responses={"buffer_seconds": 0})
    api = lv.api
    await _post_ghosts(api)
    await _wait_unmatched(api)

    p = page.page
    await p.goto(api.base + "/")
    await p.fill("#token", READER)
    await p.click("#login button")
    link = p.locator('#responses td[data-count="unmatched"] a')
    await link.wait_for()
    assert await link.inner_text() == str(GHOSTS)
    await page.shot("responses")
    await link.click()

    rows = p.locator("#unmatched tr[data-response]")
    await rows.nth(19).wait_for()
    assert await rows.count() == 20
    assert await p.locator('header nav a[data-view="unmatched"]').get_attribute(
        "class") == "active"
    newest = await rows.first.inner_text()
    assert "ghost-order-22" in newest
    assert '{"order":22}' in newest
    assert "http" in newest
    await p.click("#unmatched #more")
    await rows.nth(GHOSTS - 1).wait_for()
    assert await rows.count() == GHOSTS
    assert await p.locator("#unmatched #more").is_hidden()
    assert await p.locator("#shown").inner_text() == f"{GHOSTS} shown"
    oldest = rows.last
    assert "ghost-order-00" in await oldest.inner_text()
    assert await oldest.locator(".badge.failed").count() == 1
    error = await oldest.locator("pre.error").inner_text()
    assert error.startswith('{"detail"')
    assert error.endswith("\u2026")  # cut: the API sent 4,096 characters, the table 300
    assert len(error) == 301
    await page.shot("unmatched")

    await p.click("#refresh")  # the first page again
    await p.locator("#shown:text-is('20 shown')").wait_for()
    assert await rows.count() == 20
    assert await p.locator("#unmatched #more").is_visible()

"""The partners' pages of the dashboard in a real headless browser (docs/dashboard.md):
the list of declared partners, a click to one partner with its buckets (used of
limit, bars), the concurrency in use, the learned rate and its last hour per
minute (accepted, refused); a queue's page links to its partner. A real downstream
accepts the tries (they stay running) and refuses those that ask for it (a bare
429: the partner's rate is learned). No console error may appear (see conftest)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.api.conftest import Api, Downstream, LiveFactory, http_queue
from tests.browser.conftest import Page

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

PARTNERS = [
    {"id": "llm", "concurrency": 8,
     "limits": [{"requests": 100, "per_seconds": 60}, {"cost": 1000, "per_seconds": 60}],
     "cost": {"estimate": "tokens"}},
    {"id": "maps", "limits": [{"requests": 10, "per_seconds": 1}]},
]


async def _refuse_some(body: dict[str, Any]) -> tuple[int, Any]:
    if body.get("data", {}).get("refuse"):
        return 429, {"error": "slow down"}
    return 202, {"ok": True}


async def _partner(api: Api) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while True:
        status, body = await api.call("GET", "/v1/partners/llm")
        assert status == 200, body
        if body["in_flight"] >= 6 and body["refused_total"] >= 1:
            return body  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.1)  # polling the API; the owner writes once a second


async def test_partners_list_and_page(live: LiveFactory, downstream: Downstream,
                                      page: Page) -> None:
    downstream.reply = _refuse_some
    lv = await live(api={"tokens": []}, partners=PARTNERS)
    api = Api(lv.api.base, lv.api.session, token=None)
    body = http_queue("summaries", downstream.url, partner="llm", concurrency=50,
                      target={"timeout_seconds": 300})
    assert (await api.call("POST", "/v1/jobs", body))[0] == 201
    jobs = [{"id": f"j{i}", "data": {"tokens": 40 + 10 * i}} for i in range(6)]
    jobs.append({"id": "no", "data": {"tokens": 5, "refuse": True}})
    assert (await api.call("POST", "/v1/jobs/summaries/batch", {"jobs": jobs}))[0] == 200
    seen = await _partner(api)

    p = page.page
    await p.goto(api.base + "/")
    await p.locator('#queues tr[data-queue="summaries"]').wait_for()
    await p.locator('header nav a[data-view="partners"]').click()
    await p.locator('#partners tr[data-partner="maps"]').wait_for()
    maps = p.locator('#partners tr[data-partner="maps"]')
    assert "no daemon holds its queues yet" in await maps.locator("td.owner").inner_text()
    assert "0/10" in await maps.locator('div.mini[data-bucket="requests_per_1s"]').inner_text()
    await p.locator('#partners a[href="#/partner/llm"]').click()

    await p.locator("#partner-page #buckets tr[data-bucket]").first.wait_for()
    assert await p.locator('header nav a[data-view="partners"].active').count() == 1
    names = await p.locator("#buckets tr[data-bucket]").evaluate_all(
        "rows => rows.map(r => r.dataset.bucket)")
    assert names == ["requests_per_60s", "cost_per_60s"]
    used = " ".join((await p.locator(
        '#buckets tr[data-bucket="requests_per_60s"] td.used').inner_text()).split())
    assert used.endswith("of 100 requests")
    assert int(used.split()[0]) >= seen["buckets"][0]["used"]
    assert await p.locator("#buckets svg.meter rect.used").count() == 2
    width = float(await p.locator("#buckets svg.meter rect.used").first.get_attribute("width")
                  or 0)
    assert width > 0  # the bar shows what is used
    assert "of 8 in flight" in await p.locator("#concurrency").inner_text()
    assert "/s learned" in await p.locator("#learned").inner_text()
    await p.locator("#partner-chart g[data-minute] rect.ok").first.wait_for()
    assert await p.locator("#partner-chart g[data-minute] rect.bad").count() >= 1
    total = await p.locator("#partner-chart-total").inner_text()
    assert "accepted" in total
    assert "refused" in total
    await page.shot("partner_page")

    # the queue's page links to its partner
    await p.goto(api.base + "/#/queue/summaries")
    await p.locator("#partner-link").click()
    await p.locator("#partner-page #buckets").wait_for()
    assert p.url.endswith("#/partner/llm")
    await p.goto(api.base + "/#/partners")
    await p.locator('#partners tr[data-partner="llm"]').wait_for()
    await page.shot("partners_list")

"""The dashboard in a real headless browser: queues, a queue's pages of queued and
running jobs, a job with its tries, cancel, pause, the morgue with replay, tokens
and roles. No console error may appear (see conftest)."""

from __future__ import annotations

from typing import Any

import pytest

from hipq.store import InboxOutcome, Response
from tests.api.conftest import ADMIN, READER, Api, Downstream, LiveFactory, http_queue
from tests.browser.conftest import Page

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


async def _fill(api: Api, downstream: Downstream) -> None:
    async def reply(body: dict[str, Any]) -> tuple[int, Any]:
        if body["queue"] == "failing":
            return 500, {"error": "the partner is down"}
        return 202, {"accepted": True}

    downstream.reply = reply
    for body in ({"id": "waiting"}, http_queue("calls", downstream.url),
                 http_queue("failing", downstream.url, attempts=1)):
        status, answer = await api.call("POST", "/v1/jobs", body)
        assert status == 201, answer
    jobs = [{"id": f"w{i:02d}", "data": {"n": i}} for i in range(25)]
    jobs.append({"id": "stale", "expires_at": "2020-01-01T00:00:00Z"})
    assert (await api.call("POST", "/v1/jobs/waiting/batch", {"jobs": jobs}))[0] == 200
    for i in range(2):
        assert (await api.call("PUT", f"/v1/jobs/calls/c{i}", {}))[0] == 201
    assert (await api.call("PUT", "/v1/jobs/failing/f1", {"data": {"x": 1}}))[0] == 201
    await api.wait_job("failing", "f1", "failed")
    await api.wait_job("waiting", "stale", "expired")
    await api.wait_job("calls", "c1", "running")


async def test_dashboard_flows(live: LiveFactory, downstream: Downstream, page: Page) -> None:
    lv = await live(api={"tokens": []})
    api = Api(lv.api.base, lv.api.session, token=None)
    await _fill(api, downstream)
    p = page.page
    await p.goto(api.base + "/")
    row = p.locator('#queues tr[data-queue="waiting"]')
    await row.wait_for()
    assert "25" in await row.inner_text()
    await p.locator("#chart").wait_for()
    assert await p.locator("#who").inner_text() == "no auth"
    await page.shot("queues")

    await p.click('#queues a:text-is("waiting")')
    await p.locator("#queued tr[data-job]").nth(19).wait_for()
    assert await p.locator("#queued tr[data-job]").count() == 20
    await p.click("#queued button.next")
    await p.locator('#queued tr[data-job="w24"]').wait_for()
    assert await p.locator("#queued tr[data-job]").count() == 5
    await page.shot("queue")

    await p.click('#queued a:text-is("w21")')
    await p.locator("#history").wait_for()
    assert "not launched yet" in await p.locator("#history").inner_text()
    assert '"n": 21' in await p.locator("#data").inner_text()
    await p.click("#cancel")
    await p.locator("#flash").wait_for()
    await p.locator("h2 .badge.cancelled").wait_for()
    assert (await api.job("waiting", "w21"))["status"] == "cancelled"

    await p.goto(api.base + "/#/queue/calls")
    await p.locator('#running tr[data-job="c1"]').wait_for()
    assert await p.locator("#running tr[data-job]").count() == 2
    await p.click('#running tr[data-job="c0"] button.cancel')
    await p.locator("#flash").wait_for()

    await p.goto(api.base + "/#/queue/failing")
    await p.locator('#failures tr[data-job="f1"]').wait_for()
    assert "http_status" in await p.locator('#failures tr[data-job="f1"]').inner_text()
    await p.click('#failures a:text-is("f1")')
    await p.locator("#history .badge").first.wait_for()
    assert "http_status" in await p.locator("#history").inner_text()
    await page.shot("job")

    await p.goto(api.base + "/#/")
    await p.click('#queues button.toggle[data-queue="waiting"]')
    await p.locator('#queues tr[data-queue="waiting"] .badge.paused').wait_for()
    assert (await api.call("GET", "/v1/jobs/waiting"))[1]["paused"] is True

    await p.click('nav a:text-is("Morgue")')
    await p.locator('#morgue tr[data-job="f1"]').wait_for()
    await p.check('#morgue input.pick[data-id="f1"]')
    await p.click("#replay-selected")
    await p.locator("#flash:text('replayed 1 job(s)')").wait_for()
    await page.shot("morgue")
    await p.click('#morgue button.tab[data-status="expired"]')
    await p.locator('#morgue tr[data-job="stale"]').wait_for()
    page_out = await api.call("GET", "/v1/queued-jobs?name=failing&state=queued")
    replays = await api.call("GET", "/v1/archived-jobs?name=failing&status=failed")
    assert len(replays[1]["jobs"]) + len(page_out[1]["jobs"]) >= 2


async def test_tokens_and_roles(live: LiveFactory, downstream: Downstream, page: Page) -> None:
    lv = await live()
    api = lv.api
    await _fill(api, downstream)
    p = page.page
    await p.goto(api.base + "/")
    await p.locator("#login").wait_for()
    await page.shot("login")
    await p.fill("#token", READER)
    await p.click("#login button")
    await p.locator('#queues tr[data-queue="waiting"]').wait_for()
    assert await p.locator("#who").inner_text() == "signed in as reader"
    assert await p.locator("#queues button.toggle").count() == 0
    await p.goto(api.base + "/#/job/waiting/w03")
    await p.locator("#history").wait_for()
    assert await p.locator("#cancel").count() == 0
    await p.goto(api.base + "/#/morgue")
    await p.locator('#morgue tr[data-job="f1"]').wait_for()
    assert await p.locator("#replay-selected").count() == 0

    await p.click("#signout")
    await p.fill("#token", ADMIN)
    await p.click("#login button")
    await p.goto(api.base + "/#/")
    await p.locator("#queues button.toggle").first.wait_for()
    assert await p.locator("#who").inner_text() == "signed in as admin"


async def test_a_long_history_says_how_much_of_it_is_shown(live: LiveFactory,
                                                           page: Page) -> None:
    """The API answers a job's last 50 history entries and their count: the job page
    shows them and says "last 50 of N"; a short history says nothing more."""
    lv = await live(api={"tokens": []})
    api = Api(lv.api.base, lv.api.session, token=None)
    assert (await api.call("POST", "/v1/jobs", {"id": "waiting"}))[0] == 201
    for job_id in ("long", "short"):
        assert (await api.call("PUT", f"/v1/jobs/waiting/{job_id}", {}))[0] == 201
    store, now = lv.daemon.service.store, lv.daemon.service.clock.now()
    # 10 late responses for each of 6 tries (the most one try records): 60 entries
    await store.inbox_insert_many([Response(correlation_key="long-key", attempt=a, result=n)
                                   for a in range(1, 7) for n in range(10)], now=now)
    rows = await store.inbox_pending_for_keys(["long-key"])
    await store.attempt_record_late_many([("waiting", "long", r) for r in rows], now=now)
    await store.inbox_mark_many([(r.id, InboxOutcome.LATE) for r in rows], now=now)
    p = page.page

    await p.goto(api.base + "/#/job/waiting/long")
    await p.locator("#history-count").wait_for()
    assert await p.locator("#history-count").inner_text() == "last 50 of 60"
    assert await p.locator("#history tbody tr").count() == 50
    assert await p.locator("#history tbody tr").last.locator("td").first.inner_text() == "6"
    await page.shot("job-long-history")

    await p.goto(api.base + "/#/job/waiting/short")
    await p.locator("#history:has-text('not launched yet')").wait_for()
    assert await p.locator("#history-count").count() == 0

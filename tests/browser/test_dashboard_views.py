"""The dashboard's views of issue 27 in a real headless browser: outcome charts drawn
from the daemon's history at once, a queue's finished jobs paged by status, finding a
job by id from the header, errors and tracebacks as text, replay from a queue's
recent failures, why the next job waits, a queue's settings (secrets masked) and an
admin setting its concurrency (the API's checks and messages). No console error may
appear (see conftest), except the one the browser logs for the refused update."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hipq.config import HttpTarget
from hipq.jobs import Job
from hipq.service import queue_config
from tests.api.conftest import READER, Api, Downstream, LiveFactory, http_queue
from tests.browser.conftest import Page

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

WORK = {"id": "work", "attempts": 1, "concurrency": 4,
        "target": {"kind": "python", "function": "tests.browser.test_dashboard_views:work"}}


def work(job: Job) -> dict[str, Any]:
    if job.data.get("fail"):
        raise ValueError(f"order {job.data['fail']} has no lines")
    return {"done": job.id}


async def _fill(api: Api) -> None:
    jobs = [{"id": f"ok{i:02d}", "data": {"n": i}} for i in range(24)]
    jobs += [{"id": f"f{i}", "data": {"fail": i}} for i in range(1, 4)]
    jobs.append({"id": "stale", "expires_at": "2020-01-01T00:00:00Z"})
    jobs.append({"id": "later", "run_after": "2999-01-01T00:00:00Z"})
    status, body = await api.call("POST", "/v1/jobs/work/batch", {"jobs": jobs})
    assert status == 200, body
    for job_id in ("ok23", "f3", "stale"):
        await api.wait_job("work", job_id, "succeeded", "failed", "expired")
    assert (await api.call("DELETE", "/v1/jobs/work/later"))[0] == 200


async def test_charts_finished_jobs_search_and_tracebacks(live: LiveFactory,
                                                          page: Page) -> None:
    lv = await live(api={"tokens": []}, queues=[WORK])
    api = Api(lv.api.base, lv.api.session, token=None)
    await _fill(api)
    p = page.page

    # the charts have bars as the page opens: the daemon kept the last hour
    await p.goto(api.base + "/")
    await p.locator("#chart g[data-minute]").first.wait_for()
    total = await p.locator("#chart-total").inner_text()
    assert "24 succeeded" in total
    assert "3 failed" in total
    assert "1 expired" in total
    row = p.locator('#queues tr[data-queue="work"]')
    assert "24 ok" in await row.locator("td.hour").inner_text()
    assert re.search(r"updated \d\d:\d\d:\d\d UTC", await p.locator("#updated").inner_text())
    await page.shot("queues_outcomes")

    # a queue: its own chart, its settings, replay from its recent failures
    await p.goto(api.base + "/#/queue/work")
    await p.locator("#queue-chart g[data-minute]").first.wait_for()
    function = p.locator('#settings tr[data-setting="target.function"]')
    assert "test_dashboard_views:work" in await function.inner_text()
    assert await p.locator("#concurrency").input_value() == "4"
    await p.locator('#failures tr[data-job="f1"]').wait_for()
    assert "UTC" in await p.locator('#failures tr[data-job="f1"] td').nth(3).inner_text()
    await page.shot("queue_overview")
    await p.click('#failures tr[data-job="f1"] button.replay')
    await p.locator("#flash:text('replayed f1 as')").wait_for()
    made = (await p.locator("#flash").inner_text()).rsplit(" ", 1)[1]
    replayed = await api.wait_job("work", made, "failed")
    assert replayed["replay_of"] == "f1"

    # finished jobs: every status, newest first, paged; one status by its tab
    await p.click("#finished-link")
    await p.locator("#finished tr[data-job]").nth(19).wait_for()
    assert await p.locator("#finished tr[data-job]").count() == 20
    finished = await api.call("GET", "/v1/archived-jobs?name=work&limit=20")
    shown = await p.locator("#finished tr[data-job]").evaluate_all(
        "rows => rows.map(r => r.dataset.job)")
    assert shown == [j["id"] for j in finished[1]["jobs"]]
    await p.click("#finished button.next")
    await p.locator("#finished .pager:has-text('page 2')").wait_for()
    assert await p.locator("#finished tr[data-job]").count() == 10  # 30 finished in all
    await p.click('#finished a.tab[data-status="cancelled"]')
    await p.locator('#finished tr[data-job="later"]').wait_for()
    assert await p.locator("#finished tr[data-job]").count() == 1
    await p.click('#finished a.tab[data-status="failed"]')
    await p.locator('#finished tr[data-job="f2"]').wait_for()
    await page.shot("finished_failed")

    # a failed job: the traceback as preformatted text, times in UTC
    await p.click('#finished a:text-is("f2")')
    trace = p.locator('#history pre.trace').first
    await trace.wait_for()
    text = await trace.inner_text()
    assert text.startswith("Traceback (most recent call last):\n")
    assert "in work\n" in text
    assert "ValueError: order 2 has no lines" in text
    assert "\\n" not in await p.locator("#view").inner_text()
    assert "ValueError('order 2 has no lines')" in await p.locator("#error .err-head").inner_text()
    finished_at = p.locator("dl dt:text-is('finished_at') + dd")
    assert (await finished_at.inner_text()).endswith(" UTC")
    await page.shot("job_traceback")

    # find a job from any page: an id alone, queue/id, and one that is nowhere
    await p.fill("#search-id", "ok07")
    await p.press("#search-id", "Enter")
    await p.wait_for_url(re.compile(r"#/job/work/ok07$"))
    await p.locator("h2 .badge.succeeded").wait_for()
    await p.fill("#search-id", "work/f3")
    await p.click("#search button")
    await p.wait_for_url(re.compile(r"#/job/work/f3$"))
    await p.fill("#search-id", "nowhere")
    await p.press("#search-id", "Enter")
    await p.locator("#not-found").wait_for()
    assert await p.locator("#not-found").inner_text() == "No job nowhere in the 1 queue searched."
    await page.shot("search_not_found")


async def test_why_jobs_wait_settings_and_concurrency(live: LiveFactory, downstream: Downstream,
                                                      page: Page) -> None:
    lv = await live(api={"tokens": []})
    api = Api(lv.api.base, lv.api.session, token=None)
    body = http_queue("partner", downstream.url, concurrency=5,
                      target={"headers": {"Authorization": "Bearer s3cr3t-value"}})
    assert (await api.call("POST", "/v1/jobs", body))[0] == 201
    assert (await api.call("POST", "/v1/jobs/partner/pause"))[0] == 200
    for i in range(3):
        assert (await api.call("PUT", f"/v1/jobs/partner/p{i}", {}))[0] == 201
    p = page.page

    await p.goto(api.base + "/#/queue/partner")
    await p.locator("#next-waits").wait_for()
    assert "paused by an operator" in (await p.locator("#paused-words").inner_text()).lower()
    said = " ".join((await p.locator("#next-waits").inner_text()).split())
    assert said.startswith("Next in line, p0, waits: paused")
    header = p.locator('#settings tr[data-setting="target.headers.Authorization"]')
    assert await header.locator("code").inner_text() == "***"
    assert "s3cr3t" not in await p.locator("#view").inner_text()
    await p.goto(api.base + "/#/")
    why = p.locator('#queues tr[data-queue="partner"] td.why')
    await why.wait_for()
    assert await why.inner_text() == "paused"

    # an admin sets the concurrency; the API's checks apply and its message shows
    await p.goto(api.base + "/#/queue/partner")
    await p.locator("#concurrency").wait_for()
    await p.fill("#concurrency", "12")
    await p.click("#concurrency-form button")
    await p.locator("#flash:text('concurrency of partner set to 12')").wait_for()
    queue = (await api.call("GET", "/v1/jobs/partner"))[1]
    assert queue["config"]["concurrency"] == 12
    stored = queue_config(await lv.daemon.service.get_queue("partner")).target
    assert isinstance(stored, HttpTarget)
    assert stored.headers == {"Authorization": "Bearer s3cr3t-value"}
    await p.locator("#concurrency[value='12']").wait_for()

    await p.fill("#concurrency", "0")
    await p.press("#concurrency", "Enter")
    flash = p.locator("#flash:text('concurrency not changed')")
    await flash.wait_for()
    assert "concurrency: Input should be greater than or equal to 1" in await flash.inner_text()
    assert (await api.call("GET", "/v1/jobs/partner"))[1]["config"]["concurrency"] == 12
    await page.shot("queue_concurrency_refused")
    page.errors[:] = [e for e in page.errors if "status of 422" not in e]


async def test_a_reader_sees_no_concurrency_form(live: LiveFactory, page: Page) -> None:
    lv = await live(queues=[WORK])
    p = page.page
    await p.goto(lv.api.base + "/")
    await p.fill("#token", READER)
    await p.click("#login button")
    await p.locator('#queues tr[data-queue="work"]').wait_for()
    await p.goto(lv.api.base + "/#/queue/work")
    await p.locator("#settings table").wait_for()
    assert await p.locator("#concurrency-form").count() == 0
    await p.fill("#search-id", "missing")
    await p.press("#search-id", "Enter")
    await p.locator("#not-found").wait_for()


async def test_changing_a_declared_queue_shows_the_api_warning(live: LiveFactory,
                                                               downstream: Downstream,
                                                               page: Page) -> None:
    """A queue declared in the config file: the API updates it and warns that the
    file applies again at the next restart; the dashboard shows the warning."""
    lv = await live(api={"tokens": []}, queues=[http_queue("declared", downstream.url)])
    p = page.page
    await p.goto(lv.api.base + "/#/queue/declared")
    await p.locator("#concurrency").wait_for()
    await p.fill("#concurrency", "3")
    await p.press("#concurrency", "Enter")
    flash = p.locator("#flash:text('concurrency of declared set to 3')")
    await flash.wait_for()
    assert "declared in the daemon's config file" in await flash.inner_text()
    await page.shot("queue_declared_warning")

"""The partner's word on a queue's dashboard page, in a real headless browser
(docs/throttling.md): the partner's pause in words with its end in UTC and its reason, group pauses
naming their group, the adaptive limit next to the configured concurrency, and the
held jobs of the last tick by reason; the admin's button ends the pauses. No
console error may appear (see conftest). The queues have no target, so their owner
never writes over what the test stored."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from hipq.store import Store
from hipq.store.records import Backoff, QueueState
from tests.api.conftest import Api, LiveFactory
from tests.browser.conftest import Page

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

REASON = "HTTP 429 from http://partner.test"


async def _store_word(store: Store, now: datetime) -> None:
    since = now - timedelta(seconds=5)
    await store.backoff_replace(queue="partner", backoffs=[Backoff(
        queue="partner", group=None, until=now + timedelta(minutes=30), reason=REASON,
        streak=3, since=since)])
    await store.backoff_replace(queue="tenants", backoffs=[
        Backoff(queue="tenants", group="eu", until=now + timedelta(minutes=20),
                reason="budget spent", streak=0, since=since),
        Backoff(queue="tenants", group="old", until=now - timedelta(minutes=1),
                reason=REASON, streak=1, since=since)])
    await store.queue_state_save([
        QueueState(queue="partner", effective=10.4,
                   held={"concurrency": 42, "window": 3, "backoff": 1, "rate_limit": 2},
                   held_at=now, throttled_total=17),
        QueueState(queue="tenants", held={"backoff": 5}, held_at=now, throttled_total=1)])


async def _queues(api: Api) -> None:
    for body in ({"id": "partner", "concurrency": 60, "adaptive": {"min": 2}},
                 {"id": "tenants", "concurrency": 8,
                  "backoff": {"scope": "group", "field": "tenant"}}):
        status, answer = await api.call("POST", "/v1/jobs", body)
        assert status == 201, answer
    jobs = [{"id": f"p{i:02d}", "data": {"n": i}} for i in range(6)]
    assert (await api.call("POST", "/v1/jobs/partner/batch", {"jobs": jobs}))[0] == 200


async def test_queue_page_tells_the_partner_word(live: LiveFactory, page: Page) -> None:
    lv = await live(api={"tokens": []})
    api = Api(lv.api.base, lv.api.session, token=None)
    assert lv.daemon.service is not None
    now = lv.daemon.service.clock.now()
    await _store_word(lv.daemon.service.store, now)
    await _queues(api)
    until = (now + timedelta(minutes=30)).strftime("%H:%M:%S")

    p = page.page
    await p.goto(api.base + "/#/queue/partner")
    pause = p.locator('#pauses li[data-group=""]')
    await pause.wait_for()
    said = " ".join((await pause.inner_text()).split())
    assert said.startswith("paused by the partner until ")
    assert f"{until} UTC ({REASON})" in said
    assert await p.locator("#adaptive").inner_text() == "adaptive: 10 of 60"
    held = [" ".join(t.split()) for t in await p.locator("#held li").all_inner_texts()]
    assert held == ["concurrency: 42 jobs wait for a free slot",
                    "window: 3 jobs wait for their window",
                    "rate_limit: 2 jobs wait for the rate limit",
                    "backoff: 1 job waits for the partner's pause"]
    assert "17 throttled tries in all" in await p.locator("#throttled").inner_text()
    await page.shot("queue_partner")

    await p.goto(api.base + "/#/job/partner/p00")  # one queued job: why it waits
    waiting = p.locator("#waiting")
    await waiting.wait_for()
    said = " ".join((await waiting.inner_text()).split())
    assert said.startswith(f"waits: backoff: {REASON} (until ")
    assert said.endswith(f"{until} UTC)")
    await page.shot("job_waiting")

    await p.goto(api.base + "/#/queue/tenants")
    group = p.locator('#pauses li[data-group="eu"]')
    await group.wait_for()
    words = " ".join((await group.inner_text()).split())
    assert words.startswith("group eu paused by the partner until ")
    assert words.endswith("UTC (budget spent)")
    assert await p.locator("#pauses li").count() == 1  # the passed pause is not shown
    assert await p.locator("#adaptive").count() == 0  # not adaptive: nothing to say
    assert await p.locator("#held li").all_inner_texts() == [
        "backoff: 5 jobs wait for the partner's pause"]

    await p.click("#end-pauses")  # an admin (no tokens here) ends the partner's pauses
    await p.locator("#flash").wait_for()
    await p.locator("#pauses").wait_for(state="detached")
    assert (await api.call("GET", "/v1/jobs/tenants"))[1]["backoff"] == []

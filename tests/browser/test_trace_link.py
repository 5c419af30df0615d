"""The job page links the job's trace when ``dashboard.trace_url`` is set, and shows
the bare trace id when it is not (docs/traces.md); no console error (CSP: the
template comes from ``GET /v1/whoami``, never from an inline script)."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api, LiveFactory
from tests.browser.conftest import Page

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
TEMPLATE = "https://grafana.example/explore?traceId={trace_id}&orgId=1"


async def _job(api: Api) -> None:
    assert (await api.call("POST", "/v1/jobs", {"id": "waiting"}))[0] == 201
    status, body = await api.call("PUT", "/v1/jobs/waiting/traced", {"data": {}},
                                  headers={"traceparent": PARENT})
    assert status == 201, body


async def test_the_job_page_links_the_trace(live: LiveFactory, page: Page) -> None:
    lv = await live(api={"tokens": []}, dashboard={"trace_url": TEMPLATE})
    api = Api(lv.api.base, lv.api.session, token=None)
    await _job(api)
    p = page.page
    await p.goto(api.base + "/#/job/waiting/traced")
    link = p.locator("#trace a")
    await link.wait_for()
    assert await link.get_attribute("href") == TEMPLATE.replace("{trace_id}", TRACE_ID)
    assert await link.inner_text() == TRACE_ID
    await page.shot("job-trace-link")


async def test_without_a_template_the_trace_id_is_shown(live: LiveFactory, page: Page) -> None:
    lv = await live(api={"tokens": []})
    api = Api(lv.api.base, lv.api.session, token=None)
    await _job(api)
    p = page.page
    await p.goto(api.base + "/#/job/waiting/traced")
    await p.locator("#trace").wait_for()
    assert await p.locator("#trace").inner_text() == f"trace: {TRACE_ID}"
    assert await p.locator("#trace a").count() == 0

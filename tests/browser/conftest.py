"""A real headless browser for the dashboard tests: Debian's ``chromium`` driven by
Playwright (no browser download; ``scripts/test`` installs the package). Every page
fails its test on a console error or an uncaught exception; screenshots go to
``tests/browser/screenshots/`` (git-ignored)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import downstream, live  # noqa: F401 (fixtures)

CHROMIUM = os.environ.get("HIPQ_TEST_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking"]
SCREENSHOTS = Path(__file__).parent / "screenshots"


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Any]:
    if not os.path.exists(CHROMIUM):  # noqa: ASYNC240 (once per session, before the loop works)
        message = f"{CHROMIUM} is missing (apt-get install -y chromium; scripts/test does)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        await chromium.close()


class Page:
    """A browser page that records console errors and page errors."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    async def shot(self, name: str) -> None:
        SCREENSHOTS.mkdir(exist_ok=True)
        await self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    wrapped = Page(await context.new_page())
    wrapped.page.set_default_timeout(10_000)
    yield wrapped
    await context.close()
    assert wrapped.errors == [], wrapped.errors

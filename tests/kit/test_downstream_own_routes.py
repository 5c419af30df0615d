"""callback_app posts only to hipq's signed response route (issue 46, finding 4).

A launch is a request anybody who reaches the downstream may send, and its
``callback_url`` names where the outcome goes. On a hipq origin, that used to be any
path: ``<hipq>/v1/jobs/greetings/pause`` paused a token-less daemon's queue, the
status route completed another job, the replay route made a job. Now only
``POST <base>/v1/responses/{key}?...sig=...`` passes, checked on the URL as aiohttp
sends it (yarl removes dot segments, ``%2e%2e`` included, before the request leaves):
other paths, extra segments, ``..`` however spelled, encoded slashes that a proxy
could decode into a walk out of the route, a missing ``sig`` or a fragment get 403
like a foreign origin. Checked against a real token-less ``hipq run``; a correct
signed callback URL still finishes its job.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from hipq.client import AsyncClient
from hipq.downstream import Launch, callback_app
from hipq.downstream.callback import WORKER
from tests.kit.conftest import HipqRun, http_target, wait_job
from tests.kit.test_client import Serve

pytestmark = pytest.mark.slow

TOKENLESS = {"host": "127.0.0.1", "port": 0}  # no api.tokens: every route is open


class BlackHole:
    """A downstream that takes hipq's launches (202) and never answers them: the
    jobs stay running, and their launches (with the signed callback URLs) are kept."""

    def __init__(self) -> None:
        self.launches: dict[str, dict[str, Any]] = {}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.take)
        return app

    async def take(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.launches[body["id"]] = body
        return web.json_response({}, status=202)


def hostile_callbacks(hipq: str) -> list[str]:
    """Callback URLs on the hipq origin that are not its signed response route."""
    q = "attempt=1&t=tok&sig=0123abcd"
    return [
        f"{hipq}/v1/jobs/greetings/pause",                        # the routes themselves
        f"{hipq}/v1/jobs/greetings/pause?{q}",
        f"{hipq}/v1/jobs/greetings/victim?{q}",                   # the status callback
        f"{hipq}/v1/jobs/archive/done/replay?{q}",
        f"{hipq}/v1/jobs?{q}",
        f"{hipq}/v1/inbox/greetings?{q}",
        f"{hipq}/v1/responses/../jobs/greetings/pause?{q}",       # dot segments
        f"{hipq}/v1/responses/%2e%2e/jobs/greetings/pause?{q}",
        f"{hipq}/v1/responses/.%2E/jobs/greetings/pause?{q}",
        f"{hipq}/v1/responses/k/../../jobs/greetings/pause?{q}",
        f"{hipq}/v1/responses/k/../../jobs/greetings/victim?{q}",
        f"{hipq}/v1/responses/./../jobs/archive/done/replay?{q}",
        f"{hipq}/v1/responses/..%2Fjobs%2Fgreetings%2Fpause?{q}",  # encoded slashes
        f"{hipq}/v1/responses/%2e%2e%2fjobs%2fgreetings%2fpause?{q}",
        f"{hipq}/v1/responses/k%2F..%2F..%2Fjobs%2Fgreetings%2Fpause?{q}",
        f"{hipq}/v1/responses/k%5C..%5C..%5Cjobs%5Cgreetings%5Cpause?{q}",
        f"{hipq}/v1/responses/..;%2Fjobs%2Fgreetings%2Fpause?{q}",
        f"{hipq}//v1/jobs/greetings/pause?{q}",                   # an empty segment
        f"{hipq}/v1//responses/k?{q}",
        f"{hipq}/v1/responses/k/pause?{q}",                       # an extra segment
        f"{hipq}/v1/responses/k/?{q}",
        f"{hipq}/v1/responses/?{q}",                              # no key
        f"{hipq}/v1/responses/k",                                 # no signature
        f"{hipq}/v1/responses/k?attempt=1&t=tok",
        f"{hipq}/v1/responses/k?attempt=1&sig=",
        f"{hipq}/v1/responses/k?{q}#/../../jobs/greetings/pause",  # a fragment
        f"{hipq}/V1/responses/k?{q}",                             # another path, near
    ]


async def test_a_launch_naming_hipqs_own_routes_is_refused_and_changes_nothing(
        hipq_run: HipqRun, serve: Serve) -> None:
    handled: list[str] = []

    async def handle(launch: Launch) -> dict[str, Any]:
        handled.append(launch.id)
        return {"hello": launch.data.get("name")}

    hipq = await hipq_run(api=TOKENLESS)
    hole = BlackHole()
    hole_url = await serve(hole.app())
    app = callback_app(handle, hipq_urls=hipq)
    down = await serve(app)
    async with AsyncClient(hipq) as client:
        await client.create_queue("greetings", attempts=1, timeout_seconds=60,
                                  target=http_target(hole_url))
        await client.create_queue("archive", attempts=1, target=http_target(hole_url))
        await client.enqueue("greetings", "victim", {"name": "v"})
        await wait_job(client, "greetings", "victim", "running")
        await client.enqueue("archive", "done", {}, run_after="2999-01-01T00:00:00Z")
        assert (await client.cancel("archive", "done")).status == "cancelled"

        answers: dict[str, int] = {}
        async with aiohttp.ClientSession() as session:
            for n, url in enumerate(hostile_callbacks(hipq)):
                body = {"id": f"evil-{n}", "queue": "greetings", "data": {}, "attempt": 1,
                        "max_attempts": 1, "correlation_key": "k", "callback_url": url}
                async with session.post(f"{down}/launch", json=body) as answer:
                    answers[url] = answer.status
        await _until(lambda: app[WORKER].pending == 0)  # whatever was accepted, delivered

        assert not (await client.get_queue("greetings")).paused
        victim = await client.get_job("greetings", "victim")
        assert (victim.status, victim.attempt) == ("running", 1)
        for state in ("queued", "running"):  # no replay of "done"
            assert [j.id async for j in client.list_jobs("archive", state)] == []
        assert [j.id async for j in client.archived("archive")] == ["done"]
        assert {url: status for url, status in answers.items() if status != 403} == {}
        assert handled == []

        # the victim's own launch, with its signed callback URL, still finishes it
        launch = hole.launches["victim"]
        assert launch["callback_url"].startswith(f"{hipq}/v1/responses/")
        async with aiohttp.ClientSession() as session, session.post(
                f"{down}/launch", json=launch) as answer:
            assert answer.status == 202
        done = await wait_job(client, "greetings", "victim", "succeeded", "failed")
        assert (done.status, done.result) == ("succeeded", {"hello": "v"})
    assert handled == ["victim"]


def test_only_the_signed_response_route_of_a_base_passes() -> None:
    """The check alone, over the bases' paths: exactly ``<base>/v1/responses/{key}``
    with a ``sig``, the key one segment that no decoding turns into a walk."""
    origins = callback_app(_never, hipq_urls=["http://h:1", "https://gw.example/hipq/"])[
        WORKER].origins
    sig = "?attempt=2&t=tok&sig=ab12"
    for url in (f"http://h:1/v1/responses/k{sig}", f"http://h:1/v1/responses/a%3Ab{sig}",
                f"http://h:1/v1/responses/a:b:c{sig}", f"http://h:1/v1/responses/~tok.2{sig}",
                f"http://h:1/v1/responses/a%2Fb%20c{sig}",  # a key with a slash, as signed
                f"http://h:1/v1/responses/a..b{sig}", f"http://h:1/v1/responses/...{sig}",
                f"http://h:1/v1/responses/%C3%A9t%C3%A9{sig}", f"http://h:1/v1/responses/a;b{sig}",
                f"https://gw.example/hipq/v1/responses/k{sig}",
                "https://gw.example:443/hipq/v1/responses/k?sig=x"):
        assert origins.target(url) is not None, url
    for url in (f"http://h:1/v1/jobs/q/pause{sig}", f"http://h:1/v1/responses{sig}",
                f"https://gw.example/v1/responses/k{sig}",  # outside the base
                f"https://gw.example/hipq/hipq/v1/responses/k{sig}",
                f"http://h:1/v1/responses/k/x{sig}", f"http://h:1/v1/responses/..{sig}",
                f"http://h:1/v1/responses/.{sig}", f"http://h:1/v1/responses/%2E{sig}",
                f"http://h:1/v1/responses/a%2F..{sig}", f"http://h:1/v1/responses/a%2F{sig}",
                f"http://h:1/v1/responses/%2Fa{sig}", f"http://h:1/v1/responses/a%2F%2Fb{sig}",
                f"http://h:1/v1/responses/a%5C..%5Cb{sig}", f"http://h:1/v1/responses/.;x{sig}",
                f"http://h:1/v1/responses/..;x{sig}", f"http://h:1/v1/responses/a%2F..;{sig}",
                f"http://h:1/v1/responses/a%252F..{sig}",  # decoded twice by a proxy pair
                f"http://h:1/v1/responses/%EF%BC%8E%EF%BC%8E{sig}",  # full-width ..
                f"http://h:1/v1/responses/a%EF%BC%8F..{sig}",  # a full-width slash
                "http://h:1/v1/responses/k?attempt=1&t=x", "http://h:1/v1/responses/k?sig",
                f"http://h:1/v1/responses/k{sig}#x", "http://h:1/v1/responses/k#?sig=x"):
        assert origins.target(url) is None, url


async def _never(launch: Launch) -> None:
    raise AssertionError("never called")


async def _until(predicate: Any, within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)  # the worker's tasks give no event to wait on
    await asyncio.sleep(0.3)  # and what they posted has reached hipq's tick

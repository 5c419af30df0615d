"""The chaos harness's downstream, a process of its own (``bench/chaos.py`` starts it).

    python bench/chaos_downstream.py --daemons PORT,PORT,... [--fail 0.2] [--twice 0.05]
        [--seed 1]

Prints ``PORT=<n>`` once it listens on 127.0.0.1. Every launch is answered ``202``
and recorded; after a short random delay its response is POSTed to the job's
signed callback URL at one of the daemons (any live one: the URL verifies at every
daemon; a dead one is skipped, the next tried). A share ``--fail`` of the tries
fail: retryable on an ``at_least_once`` queue (name ending ``-alo``), not retryable
elsewhere, so an ``at_most_once`` job is launched once at most. A failure's error is
a text (``"error": "chaos: ..."``), not an object, as many downstreams send it: one
that reaches a try already ended (cut by a kill) is recorded on the job's history
as a late response, and the job must still read (issue 46). A share ``--twice`` of
the succeeded tries is called back a second time a moment later, failing, as a
downstream that repeats itself does: a late response (the try has ended), recorded
on the job's history and never applied.

It counts the launches outstanding per queue (received, response not yet sent)
and their peak: the concurrency the downstream sees. ``GET /_dump`` returns
``{"launches": [[queue, id, attempt, arrival time.time()], ...], "peak": {...},
"outstanding": {...}, "answered": n, "again": n}`` (``again``: second answers sent).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from aiohttp import ClientError, ClientSession, ClientTimeout, web


class Downstream:
    def __init__(self, daemon_ports: list[int], fail: float, seed: int,
                 max_delay: float, twice: float = 0.0) -> None:
        self.ports = daemon_ports
        self.fail = fail
        self.twice = twice
        self.rng = random.Random(seed)
        self.max_delay = max_delay
        self.launches: list[tuple[str, str, int, float]] = []
        self.outstanding: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.answered = 0
        self.again = 0
        self.session: ClientSession | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def launch(self, request: web.Request) -> web.Response:
        body = await request.json()
        queue, job_id = request.match_info["queue"], request.match_info["id"]
        self.launches.append((queue, job_id, int(body["attempt"]), time.time()))
        self.outstanding[queue] = self.outstanding.get(queue, 0) + 1
        self.peak[queue] = max(self.peak.get(queue, 0), self.outstanding[queue])
        task = asyncio.create_task(self._respond(queue, body["callback_url"]))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return web.json_response({"ok": True}, status=202)

    async def _respond(self, queue: str, url: str) -> None:
        await asyncio.sleep(self.rng.random() * self.max_delay)
        if self.rng.random() < self.fail:
            body: dict[str, Any] = {"status": "failed", "retryable": queue.endswith("-alo"),
                                    "result": {"error": "chaos"},
                                    "error": "chaos: the downstream failed this try"}
        else:
            body = {"status": "succeeded", "result": {"ok": True}}
        self.outstanding[queue] -= 1
        await self._post(url, body)
        if self.twice and body["status"] == "succeeded" and self.rng.random() < self.twice:
            await asyncio.sleep(0.05 + self.rng.random() * self.max_delay)
            await self._post(url, {"status": "failed", "retryable": False,
                                   "error": "chaos: a second answer, after the first"})
            self.again += 1

    async def _post(self, url: str, body: dict[str, Any]) -> None:
        """POST ``body`` to the callback ``url`` at a live daemon (any: the URL
        verifies at every one), until one answers below 500."""
        assert self.session is not None
        parts = urlsplit(url)
        start = self.rng.randrange(len(self.ports))
        attempt = 0
        while True:
            port = self.ports[(start + attempt) % len(self.ports)]
            attempt += 1
            target = urlunsplit(parts._replace(netloc=f"127.0.0.1:{port}"))
            try:
                async with self.session.post(target, json=body) as answer:
                    if answer.status < 500:
                        self.answered += 1
                        return
            except (ClientError, OSError, TimeoutError):
                pass
            await asyncio.sleep(0.05 if attempt % len(self.ports) else 0.5)

    async def dump(self, _request: web.Request) -> web.Response:
        return web.json_response({"launches": self.launches, "peak": self.peak,
                                  "outstanding": self.outstanding,
                                  "answered": self.answered, "again": self.again})


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--daemons", required=True)
    parser.add_argument("--fail", type=float, default=0.2)
    parser.add_argument("--twice", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-delay", type=float, default=0.1)
    args = parser.parse_args()
    service = Downstream([int(p) for p in args.daemons.split(",")], args.fail, args.seed,
                         args.max_delay, args.twice)
    service.session = ClientSession(timeout=ClientTimeout(total=5))
    app = web.Application()
    app.router.add_post("/launch/{queue}/{id}", service.launch)
    app.router.add_get("/_dump", service.dump)
    await serve(app)
    await asyncio.Event().wait()


async def serve(app: web.Application) -> None:
    """Serve ``app`` on a free port of 127.0.0.1 and print ``PORT=<n>`` (what the
    harness reads); the chaos responders' one way to say where they listen."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    sys.stdout.write(f"PORT={port}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())

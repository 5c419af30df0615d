"""A fast local downstream for the HTTP target, run as its own process by bench/run.

    python bench/downstream.py --mode sync|callback|accept [--record] [--hand-written]
                               [--hipq-url URL ...] [--max-pending N]

Prints ``PORT=<n>`` once it listens on 127.0.0.1. Modes:

* ``sync``: answers every launch ``200 {"ok": true}`` (the job succeeds);
* ``callback``: hipq.downstream's ``callback_app`` with a handler that succeeds at
  once (202, then the outcome POSTed to the job's signed ``callback_url``, which
  must be on a ``--hipq-url``: required, as callback_app's ``hipq_urls``; pending
  launches bounded by ``--max-pending``, by default more than a run launches at
  once, as a 503 would fail jobs and skew the figures); with
  ``--hand-written``, the aiohttp handler it replaced, kept to compare the two;
* ``accept``: answers ``202`` and never calls back (the job stays running).

With ``--record`` it keeps, per job id, the wall-clock time (``time.time()``) the
launch arrived (callback_app: when the handler started), and in callback mode when
the callback was sent (callback_app: when the handler returned) and, hand-written
only, acknowledged;
``GET /_dump`` returns them as JSON. ``GET /_count`` returns the launches seen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from aiohttp import ClientSession, TCPConnector, web

from hipq.cli.context import loop_factory
from hipq.downstream import Launch, callback_app

OK = json.dumps({"ok": True})


class Downstream:
    def __init__(self, mode: str, record: bool) -> None:
        self.mode = mode
        self.record = record
        self.launches = 0
        self.times: dict[str, dict[str, float]] = {}
        self.session: ClientSession | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def launch(self, request: web.Request) -> web.Response:
        arrived = time.time()
        self.launches += 1
        if self.mode == "sync" and not self.record:
            return web.Response(text=OK, content_type="application/json")
        body: dict[str, Any] = await request.json()
        if self.record:
            self.times[body["id"]] = {"launch": arrived}
        if self.mode == "sync":
            return web.Response(text=OK, content_type="application/json")
        if self.mode == "callback":
            task = asyncio.create_task(self.call_back(body["id"], body["callback_url"]))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return web.Response(status=202)

    async def call_back(self, job_id: str, url: str) -> None:
        assert self.session is not None
        sent = time.time()
        async with self.session.post(url, json={"status": "succeeded"}) as answer:
            await answer.read()
            status = answer.status
        if self.record:
            self.times[job_id].update(cb_sent=sent, cb_ack=time.time(), cb_status=status)

    async def handle(self, launch: Launch) -> None:
        """callback_app's handler: succeed at once (recording the times)."""
        self.launches += 1
        if self.record:
            now = time.time()
            self.times[launch.id] = {"launch": now, "cb_sent": now}

    async def dump(self, request: web.Request) -> web.Response:
        return web.json_response(self.times)

    async def count(self, request: web.Request) -> web.Response:
        return web.json_response({"launches": self.launches})


async def serve(args: argparse.Namespace) -> None:
    downstream = Downstream(args.mode, args.record)
    downstream.session = ClientSession(connector=TCPConnector(limit=100))
    kit = args.mode == "callback" and not args.hand_written
    app = callback_app(downstream.handle, hipq_urls=args.hipq_url,
                       max_pending=args.max_pending) if kit else web.Application(
        client_max_size=4 * 2**20)
    app.router.add_get("/_dump", downstream.dump)
    app.router.add_get("/_count", downstream.count)
    if not kit:
        app.router.add_post("/{tail:.*}", downstream.launch)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"PORT={port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await downstream.session.close()
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["sync", "callback", "accept"], required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--hand-written", action="store_true",
                        help="callback mode: the hand-written handler, not callback_app")
    parser.add_argument("--hipq-url", action="append", default=[], metavar="URL",
                        help="callback mode: a hipq base URL callbacks may go to (repeatable)")
    parser.add_argument("--max-pending", type=int, default=1_000_000,
                        help="callback mode: callback_app's max_pending")
    args = parser.parse_args()
    if args.mode == "callback" and not args.hand_written and not args.hipq_url:
        parser.error("--mode callback needs --hipq-url (callback_app's hipq_urls)")
    # uvloop, as hipq runs (hipq.cli.context.loop_factory) and as docs/downstream.md
    # suggests for a downstream that serves many launches
    factory = loop_factory("auto")
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(serve(args))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()

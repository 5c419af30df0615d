"""The callback-mode downstream alone: N launches POSTed to bench/downstream.py
(``--mode callback``: hipq.downstream's callback_app, or ``--hand-written``), each
answered 202 and then called back to a sink on 127.0.0.1; prints the seconds until
every callback arrived, and jobs/s, as one JSON line.

    .venv/bin/python bench/callback_downstream.py --jobs 20000 [--hand-written]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from aiohttp import ClientSession, TCPConnector, web

BENCH = Path(__file__).resolve().parent


async def run(jobs: int, in_flight: int, hand_written: bool) -> dict[str, object]:
    arrived = 0
    all_in = asyncio.Event()

    async def sink(request: web.Request) -> web.Response:
        nonlocal arrived
        await request.read()
        arrived += 1
        if arrived >= jobs:
            all_in.set()
        return web.json_response({"accepted": True}, status=202)

    app = web.Application()
    app.router.add_post("/v1/responses/{key}", sink)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, backlog=1024).start()
    sink_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    argv = [sys.executable, str(BENCH / "downstream.py"), "--mode", "callback",
            "--hipq-url", sink_url]
    proc = await asyncio.create_subprocess_exec(
        *argv, *(["--hand-written"] if hand_written else []), stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    port = (await proc.stdout.readline()).decode().strip().split("=", 1)[1]
    try:
        async with ClientSession(connector=TCPConnector(limit=in_flight)) as session:
            async def launch(n: int) -> None:
                body = {"id": f"j{n}", "queue": "bench", "data": {"n": n}, "attempt": 1,
                        "max_attempts": 3, "correlation_key": f"k{n}",
                        "callback_url": f"{sink_url}/v1/responses/k{n}?attempt=1&sig=x"}
                async with session.post(f"http://127.0.0.1:{port}/launch", json=body) as answer:
                    assert answer.status == 202, answer.status

            t0 = time.monotonic()
            for start in range(0, jobs, in_flight):
                chunk = range(start, min(jobs, start + in_flight))
                await asyncio.gather(*(launch(n) for n in chunk))
            await asyncio.wait_for(all_in.wait(), 300)
            seconds = time.monotonic() - t0
    finally:
        proc.terminate()
        await proc.wait()
        await runner.cleanup()
    return {"bench": "callback_downstream", "jobs": jobs,
            "downstream": "hand-written" if hand_written else "hipq.downstream",
            "seconds": round(seconds, 2), "jobs_per_second": round(jobs / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--hand-written", action="store_true")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.jobs, args.in_flight, args.hand_written))))


if __name__ == "__main__":
    main()

"""CPU per launch request: hipq's HTTP client (hipq.targets.http_pool) against
aiohttp's client as the HTTP target used it before, on the same event loop.

    python bench/http_client.py [--requests 20000] [--rounds 3] [--loop uvloop|asyncio]

The server is bench/downstream.py in ``accept`` mode (aiohttp, 202 to every POST) in
its own process. Each round sends the same launch body (the shape of a callback-mode
launch) ``--requests`` times, 100 in flight, through each client in turn; reported:
requests/s and this process's CPU (user + system) per request, medians over rounds.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from hipq.targets.http_pool import Endpoint, HttpPool, header_block

BENCH = Path(__file__).resolve().parent
IN_FLIGHT = 100
BODY = json.dumps({
    "id": "job-000123", "queue": "bench", "data": {"orderId": 123, "version": 1},
    "attempt": 1, "max_attempts": 3, "correlation_key": "~3f2a9c7be1d04e8f.1",
    "callback_url": "http://127.0.0.1:8080/v1/responses/~3f2a9c7be1d04e8f.1?attempt=1"
                    "&t=3f2a9c7be1d04e8f&sig=" + "f" * 64}).encode()
KEY = "~3f2a9c7be1d04e8f.1"

Post = Callable[[], Awaitable[int]]


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(post: Post, requests: int) -> dict[str, float]:
    slots = asyncio.Semaphore(IN_FLIGHT)

    async def one() -> None:
        async with slots:
            status = await post()
            assert status == 202, status

    await asyncio.gather(*(one() for _ in range(500)))  # warm: connections, caches
    started, cpu0 = time.perf_counter(), cpu()
    await asyncio.gather(*(one() for _ in range(requests)))
    wall, used = time.perf_counter() - started, cpu() - cpu0
    return {"requests_per_s": requests / wall, "cpu_us_per_request": used / requests * 1e6}


async def run(url: str, requests: int, rounds: int) -> dict[str, list[dict[str, float]]]:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200,
                                                                   keepalive_timeout=30))
    timeout = aiohttp.ClientTimeout(total=30)
    payload = json.loads(BODY)

    async def via_aiohttp() -> int:  # as hipq's HTTP target did up to 0.1
        async with session.post(url, json=payload, headers={"Hipq-Correlation-Key": KEY},
                                timeout=timeout, allow_redirects=False) as answer:
            await answer.content.read(64 * 1024)
            return answer.status

    pool = HttpPool(limit=200, cap=64 * 1024)
    target = Endpoint.parse(url)
    fixed = header_block([("User-Agent", "hipq"), ("Accept-Encoding", "identity"),
                          ("Content-Type", "application/json")])

    async def via_pool() -> int:
        headers = fixed + header_block([("Hipq-Correlation-Key", KEY)])
        return (await pool.post(target, headers, BODY, within=30)).status

    results: dict[str, list[dict[str, float]]] = {"aiohttp": [], "hipq": []}
    try:
        for _ in range(rounds):
            results["aiohttp"].append(await measure(via_aiohttp, requests))
            results["hipq"].append(await measure(via_pool, requests))
    finally:
        await session.close()
        await pool.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, str(BENCH / "downstream.py"), "--mode", "accept"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline().strip()
        port = int(line.removeprefix("PORT="))
        url = f"http://127.0.0.1:{port}/v1/jobs/bench/job-000123"
        factory = None
        if args.loop == "uvloop":
            import uvloop
            factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            results = runner.run(run(url, args.requests, args.rounds))
    finally:
        server.terminate()
        server.wait()
    medians = {name: {key: round(statistics.median(r[key] for r in runs), 1)
                      for key in runs[0]} for name, runs in results.items()}
    print(json.dumps({"loop": args.loop, "requests": args.requests, "rounds": args.rounds,
                      "cpu": platform.processor() or platform.machine(),
                      "loadavg": os.getloadavg(), "median": medians, "runs": results}))


if __name__ == "__main__":
    main()

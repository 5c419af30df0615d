"""Cost budgets (docs/throttling.md, "Partners"): two queues, two API keys, one partner
that counts cost.

The partner (``hipq.downstream.partner`` in its own process) allows each API key
2,000 cost units and 50 requests a second (``--limit cost:2000/1 --limit
requests:50/1``, fixed windows), estimates a launch's cost from ``data.estimate``,
charges the actual cost (the estimate times a factor drawn uniformly from 0.5-1.5,
``--usage-factor 0.5-1.5``) and reports it in its sync answer (``"usage": {"cost":
n}``); an accepted launch takes 0.1 s, a refusal is a bare 429.

hipq declares the partner once, with the partner's own figures, per key::

    partners:
      - id: llm
        by: api_key
        limits: [{cost: 2000, per_seconds: 1}, {requests: 50, per_seconds: 1}]
        cost: {estimate: estimate}

and two queues (``summaries``, ``embeddings``, 60 at once each, an HTTP target in
sync mode) name it. The jobs (``{"api_key": "key-a" | "key-b", "estimate": n}``, n
drawn uniformly from 20-100, so that cost and not requests binds: about 33
launches a second a key) alternate between the keys and between the queues, all
enqueued at once with the batch API into a real ``hipq run``. After a warm-up
(counted from the partner's first request) the partner's counters are reset and,
``--seconds`` later (30 by default), read (``GET /_partner/stats``): per key, the
actual cost it accepted as a share of its budget (2,000 a second over the window),
and the refused share of its requests. Then every job must end: failed jobs and
attempts spent on refusals are read from the database.

The goal, per key: accepted cost at least 85% of the budget, refused requests under
2%, 0 failed jobs (and 0 attempts spent on refusals).

    .venv/bin/python bench/partner_cost.py                       # SQLite, 30 s
    .venv/bin/python bench/partner_cost.py --database postgresql://... --seconds 30

The test is ``tests/bench/test_partner_cost.py`` (a shorter window).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp

from hipq.downstream.partner import PartnerProcess

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: a module or a script
from common import (
    drop_database,
    free_port,
    fresh_database,
    hipq_config,
    hipq_daemon,
    loadavg,
    log,
    machine,
)
from nginx_defaults import outcome
from partner_proof import Reader, fresh_sqlite

PARTNER = "llm"
QUEUES = ("summaries", "embeddings")
KEYS = ("key-a", "key-b")
COST_PER_S = 2000
REQUESTS_PER_S = 50
ESTIMATES = (20, 100)  # drawn uniformly (whole units): mean 60, ~33 launches/s a key
USAGE_FACTOR = "0.5-1.5"
LATENCY_SECONDS = 0.1
QUEUE_CONCURRENCY = 60
WARMUP_SECONDS = 5.0
MEASURE_SECONDS = 30.0
SPARE_SECONDS = 8.0  # jobs enough for this much more: the window never runs dry
BATCH = 500

# the goal, per key
MIN_COST_SHARE = 0.85
MAX_REFUSED_SHARE = 0.02


def partner_args(seed: int) -> list[str]:
    return ["--limit", f"cost:{COST_PER_S}/1", "--limit", f"requests:{REQUESTS_PER_S}/1",
            "--cost-field", "data.estimate", "--usage-factor", USAGE_FACTOR,
            "--key-field", "data.api_key", "--latency", str(LATENCY_SECONDS),
            "--mode", "sync", "--seed", str(seed)]


def partner_config() -> dict[str, Any]:
    """The partner as hipq declares it: the partner's own figures, per key."""
    return {"id": PARTNER, "by": "api_key",
            "limits": [{"cost": COST_PER_S, "per_seconds": 1},
                       {"requests": REQUESTS_PER_S, "per_seconds": 1}],
            "cost": {"estimate": "estimate"}}


def queue_configs(url: str) -> list[dict[str, Any]]:
    return [{"id": name, "concurrency": QUEUE_CONCURRENCY, "partner": PARTNER,
             "target": {"kind": "http", "url": f"{url}/v1/{name}", "mode": "sync"}}
            for name in QUEUES]


def jobs_for(seconds: float) -> int:
    """Enough jobs to keep both keys' cost budgets busy for ``seconds``."""
    mean = sum(ESTIMATES) / 2
    return math.ceil(seconds * len(KEYS) * COST_PER_S / mean / 100.0) * 100


def make_jobs(jobs: int, seed: int, prefix: str) -> dict[str, list[dict[str, Any]]]:
    """Job n: key n % 2, queue (n // 2) % 2 (each key in both queues), a random
    estimate."""
    draw = random.Random(seed)
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in QUEUES}
    for n in range(jobs):
        out[QUEUES[(n // len(KEYS)) % len(QUEUES)]].append(
            {"id": f"{prefix}-{n}",
             "data": {"api_key": KEYS[n % len(KEYS)], "estimate": draw.randint(*ESTIMATES)}})
    return out


async def enqueue(base: str, batches: dict[str, list[dict[str, Any]]]) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        longest = max(len(b) for b in batches.values())
        for start in range(0, longest, BATCH):
            for name, jobs in batches.items():
                chunk = jobs[start:start + BATCH]
                if not chunk:
                    continue
                async with session.post(f"{base}/v1/jobs/{name}/batch",
                                        json={"jobs": chunk}) as answer:
                    if answer.status != 200:
                        raise SystemExit(f"batch enqueue: {answer.status} {await answer.text()}")


async def partner_view(base: str) -> Any:
    """hipq's own view of the partner (GET /v1/partners/llm), None where not served."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        try:
            async with session.get(f"{base}/v1/partners/{PARTNER}") as answer:
                return await answer.json() if answer.status == 200 else None
        except (aiohttp.ClientError, ValueError):
            return None


def timeline(stats: dict[str, Any], opened_epoch: float) -> dict[str, list[list[int]]]:
    """Per key, per second of the window: [second, accepted, refused]."""
    counts: dict[str, dict[int, list[int]]] = {key: {} for key in KEYS}
    for at, key, status in stats.get("requests", []):
        if key in counts:
            second = counts[key].setdefault(int(at - opened_epoch), [0, 0])
            second[0 if status in (200, 202) else 1] += 1
    return {key: [[n, *seconds[n]] for n in sorted(seconds)] for key, seconds in counts.items()}


def per_key(stats: dict[str, Any], seconds: float) -> dict[str, Any]:
    out = {}
    for key in KEYS:
        counted = stats.get("keys", {}).get(key, {})
        accepted, refused = int(counted.get("accepted", 0)), int(counted.get("refused", 0))
        cost = float(counted.get("cost", 0))
        out[key] = {
            "accepted": accepted, "refused": refused, "cost": round(cost, 1),
            "cost_share": round(cost / (COST_PER_S * seconds), 4),
            "requests_per_s": round(accepted / seconds, 1),
            "refused_share": round(refused / max(accepted + refused, 1), 4),
            "buckets": {name: {k: b.get(k) for k in ("accepted", "refused", "max_used")}
                        for name, b in counted.get("buckets", {}).items()},
        }
    return out


async def run(*, database: str = "sqlite", seconds: float = MEASURE_SECONDS,
              warmup: float = WARMUP_SECONDS, jobs: int | None = None, seed: int = 48,
              workdir: Path, within: float = 180.0, name: str = "partner_cost") -> dict[str, Any]:
    """One run (see the module docstring): the report, with ``passed``."""
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    jobs = jobs or jobs_for(warmup + seconds + SPARE_SECONDS)
    db_name = f"bench_{name}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    if database == "sqlite":
        path = fresh_sqlite(workdir, name)
        db_url, reader = f"sqlite+aiosqlite:///{path}", Reader(sqlite_path=path)
    else:
        db_url = await fresh_database(database, db_name)
        reader = Reader(pg_url=db_url)
    load = [loadavg()]
    try:
        async with AsyncExitStack() as stack:
            partner = await PartnerProcess.start(*partner_args(seed))
            stack.push_async_callback(partner.stop)
            port = free_port()
            config = hipq_config(db_url, port, queue_configs(partner.url))
            config["partners"] = [partner_config()]
            config["api"]["public_url"] = f"http://127.0.0.1:{port}"
            daemon = await stack.enter_async_context(hipq_daemon(config, workdir, name))
            started = time.monotonic()
            await enqueue(daemon.base_url, make_jobs(jobs, seed, name))
            enqueued_s = time.monotonic() - started
            while (await partner.stats())["accepted"] == 0:
                if time.monotonic() - started > 60:
                    raise SystemExit(f"the partner saw no launch in 60 s; see {daemon.log_path}")
                await asyncio.sleep(0.05)
            await asyncio.sleep(warmup)
            await partner.reset()
            opened, opened_epoch = time.monotonic(), time.time()
            await asyncio.sleep(seconds)
            stats = await partner.stats()
            window = time.monotonic() - opened
            done_at_close = int(await reader.value(
                "SELECT count(*) FROM archived_jobs") or 0)
            view = await partner_view(daemon.base_url)
            deadline = time.monotonic() + within
            while time.monotonic() < deadline:
                if int(await reader.value("SELECT count(*) FROM archived_jobs") or 0) >= jobs:
                    break
                await asyncio.sleep(0.25)
            result = await outcome(reader)
    finally:
        await reader.close()
        if database != "sqlite":
            await drop_database(database, db_name)
    load.append(loadavg())
    keys = per_key(stats, window)
    report: dict[str, Any] = {
        "database": "sqlite" if database == "sqlite" else "postgresql",
        "jobs": jobs, "seed": seed, "warmup_s": warmup, "seconds": round(window, 2),
        "enqueue_s": round(enqueued_s, 2),
        "partner": {"cost_per_s": COST_PER_S, "requests_per_s": REQUESTS_PER_S,
                    "estimates": list(ESTIMATES), "usage_factor": USAGE_FACTOR,
                    "latency_s": LATENCY_SECONDS},
        "keys": keys,
        "min_cost_share": min(k["cost_share"] for k in keys.values()),
        "max_refused_share": max(k["refused_share"] for k in keys.values()),
        "window_ran_dry": done_at_close >= jobs, "loadavg": load,
        "hipq_partner_view": view, **result,
        "timeline": timeline(stats, opened_epoch),
    }
    report["passed"] = (report["min_cost_share"] >= MIN_COST_SHARE
                        and report["max_refused_share"] < MAX_REFUSED_SHARE
                        and not report["window_ran_dry"]
                        and result["failed_jobs"] == 0 and result["terminal"] == jobs
                        and result["attempts_spent_on_refusals"] == 0)
    return report


def brief(report: dict[str, Any]) -> str:
    keys = "; ".join(f"{key} cost {k['cost_share']:.1%} of the budget, refused "
                     f"{k['refused_share']:.2%} ({k['requests_per_s']}/s)"
                     for key, k in report["keys"].items())
    return (f"{report['database']}: {keys}; failed {report['failed_jobs']}, attempts on "
            f"refusals {report['attempts_spent_on_refusals']}; load {report['loadavg'][-1][0]} -> "
            + ("PASSED" if report["passed"] else "NOT passed"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--database", default="sqlite", help="sqlite, or a PostgreSQL server URL")
    p.add_argument("--seconds", type=float, default=MEASURE_SECONDS, help="the measured window")
    p.add_argument("--warmup", type=float, default=WARMUP_SECONDS)
    p.add_argument("--jobs", type=int, default=None,
                   help="default: enough for the warm-up, the window and a few seconds more")
    p.add_argument("--seed", type=int, default=48)
    p.add_argument("--workdir", type=Path, default=Path(__file__).parent / ".logs" / "cost")
    p.add_argument("--out", type=Path, default=None, help="also write the report here")
    args = p.parse_args()
    report = asyncio.run(run(database=args.database, seconds=args.seconds, warmup=args.warmup,
                             jobs=args.jobs, seed=args.seed, workdir=args.workdir))
    report["machine"] = machine()
    log(brief(report))
    text = json.dumps(report, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()

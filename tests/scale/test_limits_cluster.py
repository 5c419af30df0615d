"""A queue's rate limit and its quotas hold across real daemons sharing one
PostgreSQL, handovers included (docs/scaling.md), as the downstream sees them: ``hipq run``
processes, an HTTP callback downstream in the test process that records when each
launch arrives and what it carries, and SIGTERMs or joining daemons that move the
queue's lease while jobs flow.

How hipq counts a launch against a rate limit: the claim that marks a job running
also inserts a ``launch_events`` row in the same transaction, stamped with the
tick's ``now``; the same ``now`` becomes the try's ``launched_at``. A later tick, on
whichever daemon owns the queue by then, counts the rows newer than ``its now -
per_seconds``, and the owner also counts its own launches that are still being sent
or were answered inside the window (a request reaches the downstream before it is
answered: :mod:`hipq.engine.rates`). A handover writes the owner's launches back
with their answer times. So the downstream's arrival times keep the limit in every
window, exactly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from tests.scale.cluster import (
    Cluster,
    Daemon,
    Downstream,
    Launch,
    http_queue,
    job_counts,
    wait_until,
)
from tests.scale.conftest import LEASE_SECONDS

pytestmark = pytest.mark.slow

MakeCluster = Callable[..., Cluster]  # the ``make_cluster`` fixture (tests/scale/conftest.py)


@dataclass
class RecordingDownstream(Downstream):
    """The scale tests' downstream (answers 202, calls back through a live daemon
    after ``delay``). It also records each launch's arrival in wall time: the
    daemons run on this host, so these times compare with the stamps they write. It
    counts the launches outstanding (received, callback not yet sent) per
    ``data.region``. ``hold``: job id -> seconds to wait before accepting its first
    try (a downstream slow to answer)."""

    arrivals: dict[tuple[str, int], float] = field(default_factory=dict)
    regions: dict[str, int] = field(default_factory=dict)
    region_peak: dict[str, int] = field(default_factory=dict)
    hold: dict[str, float] = field(default_factory=dict)

    async def handle(self, request: web.Request) -> web.Response:
        wall = time.time()
        body = await request.json()  # aiohttp caches the body: the base class reads it again
        job, attempt = request.match_info["id"], int(body["attempt"])
        self.arrivals[(job, attempt)] = wall
        if attempt == 1 and job in self.hold:
            await asyncio.sleep(self.hold[job])
        region = str(body["data"].get("region", ""))
        self.regions[region] = self.regions.get(region, 0) + 1
        self.region_peak[region] = max(self.region_peak.get(region, 0), self.regions[region])
        return await super().handle(request)

    async def respond(self, launch: Launch, body: dict[str, Any]) -> None:
        self.regions[str(launch.body["data"].get("region", ""))] -= 1
        await super().respond(launch, body)


@pytest.fixture
async def recorder() -> AsyncIterator[RecordingDownstream]:
    service = RecordingDownstream()
    await service.start()
    yield service
    await service.close()


async def _enqueue(cluster: Cluster, queue: str, jobs: list[tuple[str, dict[str, Any]]]) -> None:
    batch = {"jobs": [{"id": i, "data": data} for i, data in jobs]}
    async with (aiohttp.ClientSession() as session,
                session.post(f"{cluster.live[0].url}/v1/jobs/{queue}/batch",
                             json=batch) as answer):
        assert answer.status == 200, await answer.text()
        statuses = {item["status"] for item in (await answer.json())["jobs"]}
        assert statuses == {"created"}, statuses


async def _owner(cluster: Cluster, queue: str, *, not_: Daemon | None = None,
                 within: float = 3 * LEASE_SECONDS) -> Daemon:
    """The live daemon that holds ``queue``'s lease, once that is not ``not_``."""
    found: list[Daemon] = []

    async def held() -> bool:
        for number, queues in (await cluster.leases()).items():
            daemon = next((d for d in cluster.live if d.number == number), None)
            if queue in queues and daemon is not None and daemon is not not_:
                found.append(daemon)
                return True
        return False

    await wait_until(held, within, f"a live daemon other than {not_} holds {queue}")
    return found[-1]


async def _finished(pg: str, count: int) -> bool:
    conn = await asyncpg.connect(pg)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM archived_jobs")) == count
    finally:
        await conn.close()


async def _tries(pg: str, queue: str) -> list[tuple[str, int, datetime, str]]:
    """Every try of the queue's jobs: (id, attempt, launched_at, outcome)."""
    conn = await asyncpg.connect(pg)
    try:
        rows = await conn.fetch(
            "SELECT job_id, attempt, launched_at, outcome FROM job_attempts WHERE queue = $1"
            " ORDER BY launched_at, job_id", queue)
    finally:
        await conn.close()
    return [(r["job_id"], r["attempt"], r["launched_at"], r["outcome"]) for r in rows]


def _busiest_window(times: list[float], seconds: float) -> tuple[int, float]:
    """The most of ``times`` in one half-open window ``[t, t + seconds)``, and ``t``.
    Half-open because the limiter counts the launches stamped after ``now -
    per_seconds``: a launch exactly ``per_seconds`` after another is allowed."""
    times = sorted(times)
    best, start, first = 0, 0.0, 0
    for last, at in enumerate(times):
        while times[first] <= at - seconds:
            first += 1
        if last - first + 1 > best:
            best, start = last - first + 1, times[first]
    return best, start


RATE_LAUNCHES, RATE_SECONDS = 5, 2.0
RATE_LIMIT = {"launches": RATE_LAUNCHES, "per_seconds": RATE_SECONDS}



async def test_rate_limit_holds_across_handovers(
        make_cluster: MakeCluster, recorder: RecordingDownstream) -> None:
    """Three daemons, 35 jobs at 5 launches per 2 s (seven windows). The queue is
    handed over twice by SIGTERM, each time just after a burst, so the next owner
    has to count the previous owner's launches from the database."""
    jobs = 7 * RATE_LAUNCHES
    recorder.delay = 0.05
    cluster = make_cluster([http_queue("rated", recorder.url, rate_limit=RATE_LIMIT)])
    recorder.cluster = cluster
    for daemon in (cluster.start(), cluster.start()):
        await cluster.wait_serving(daemon)
    owner = await _owner(cluster, "rated")
    await _enqueue(cluster, "rated", [(f"r{i:02d}", {"n": i}) for i in range(jobs)])

    await recorder.wait_for(RATE_LAUNCHES + 3, within=10)  # inside the second window
    assert await cluster.stop(owner) == 0
    owner = await _owner(cluster, "rated", not_=owner)
    third = cluster.start()
    await cluster.wait_serving(third)
    await recorder.wait_for(3 * RATE_LAUNCHES + 3, within=15)  # inside the fourth window
    assert await cluster.stop(owner) == 0
    last = await _owner(cluster, "rated", not_=owner)
    assert last is third
    await wait_until(lambda: _finished(cluster.pg, jobs), 30, "all jobs finished")

    assert await job_counts(cluster.pg) == {"succeeded": jobs}
    tries = await _tries(cluster.pg, "rated")
    assert sorted((job, attempt) for job, attempt, _, _ in tries) == sorted(
        recorder.arrivals), "the downstream saw exactly the recorded tries"
    assert len(recorder.launches) == jobs  # one try each: nothing re-sent, no lost try
    stamps = [at.timestamp() for _, _, at, _ in tries]
    arrivals = [recorder.arrivals[(job, attempt)] for job, attempt, _, _ in tries]
    delays = [arrived - stamp for arrived, stamp in zip(arrivals, stamps, strict=True)]
    summary = (f"launch -> arrival {min(delays) * 1000:.0f}-{max(delays) * 1000:.0f} ms; "
               f"busiest {RATE_SECONDS:g} s at the downstream: "
               f"{_busiest_window(arrivals, RATE_SECONDS)[0]}")

    # Exact, cluster-wide: what the limiter counted (three owners' launches in one
    # table) never exceeds the limit in any window, and the limit is reached
    assert _busiest_window(stamps, RATE_SECONDS)[0] == RATE_LAUNCHES, summary
    # The downstream: every launch arrived after it was counted, and its arrival
    # times keep the limit in every window
    assert min(delays) >= 0, summary
    busiest, at = _busiest_window(arrivals, RATE_SECONDS)
    assert busiest <= RATE_LAUNCHES, f"{busiest} arrivals from {at:.3f}; {summary}"


async def test_rate_limit_as_seen_by_the_downstream(
        make_cluster: MakeCluster, recorder: RecordingDownstream) -> None:
    """docs/scaling.md: the rate limit holds "as seen by the downstream". Ten jobs, 5 launches
    per 2 s, a target that sends one request at a time, and a downstream that takes
    1.5 s to accept the first job. The first window's other four launches
    reach it at about 1.5 s, and the second window's five at about 2 s."""
    recorder.delay = 0.05
    recorder.hold = {"s00": 1.5}
    queue = http_queue("rated", recorder.url, rate_limit=RATE_LIMIT)
    queue["target"]["max_in_flight"] = 1
    cluster = make_cluster([queue])
    recorder.cluster = cluster
    for daemon in (cluster.start(), cluster.start()):
        await cluster.wait_serving(daemon)
    await _owner(cluster, "rated")
    await _enqueue(cluster, "rated", [(f"s{i:02d}", {"n": i}) for i in range(10)])
    await wait_until(lambda: _finished(cluster.pg, 10), 20, "all jobs finished")
    assert await job_counts(cluster.pg) == {"succeeded": 10}
    stamps = [at.timestamp() for _, _, at, _ in await _tries(cluster.pg, "rated")]
    assert _busiest_window(stamps, RATE_SECONDS)[0] == RATE_LAUNCHES  # counted right

    busiest, at = _busiest_window(list(recorder.arrivals.values()), RATE_SECONDS)
    assert busiest <= RATE_LAUNCHES, (
        f"the downstream received {busiest} launches within {RATE_SECONDS:g} s "
        f"(from {at - min(recorder.arrivals.values()):.3f} s), limit {RATE_LAUNCHES}")


QUOTAS = {"field": "region", "shares": {"east": 0.5, "west": 0.5}}
PER_REGION = 30


async def test_quotas_hold_across_handovers(
        make_cluster: MakeCluster, recorder: RecordingDownstream) -> None:
    """Concurrency 4 split east 0.5 / west 0.5 (2 running per region, none for any
    other region). 30 jobs per region, each held 0.2-0.6 s by the downstream, so
    running jobs pile up to both limits. The queue is handed over twice while jobs
    run: to a daemon that joins (the first one is over its share), then by SIGTERM.
    Every time, the new owner adopts the running jobs of both regions and counts them."""
    recorder.delay = 0.4
    cluster = make_cluster([{"id": "a-idle", "attempts": 1},  # no target: never launches
                            http_queue("b-quota", recorder.url, concurrency=4, quotas=QUOTAS)])
    recorder.cluster = cluster
    first = cluster.start()
    await cluster.wait_serving(first)
    # east first in queue order: a region at its quota must not hold the other back
    jobs = [(f"{region}{i:02d}", {"region": region}) for region in ("east", "west")
            for i in range(PER_REGION)]
    await _enqueue(cluster, "b-quota", jobs)

    await recorder.wait_for(8, within=10)
    second = cluster.start()  # the first daemon holds both queues: it hands b-quota over
    await cluster.wait_serving(second)
    owner = await _owner(cluster, "b-quota", not_=first, within=2 * LEASE_SECONDS + 1)
    assert owner is second
    await recorder.wait_for(len(jobs) // 2, within=20)
    third = cluster.start()
    await cluster.wait_serving(third)
    assert await cluster.stop(second) == 0  # and over again
    await _owner(cluster, "b-quota", not_=second)
    await wait_until(lambda: _finished(cluster.pg, len(jobs)), 30, "all jobs finished")

    # the limits held at every moment, and were reached
    assert recorder.region_peak == {"east": 2, "west": 2}, recorder.region_peak
    assert recorder.peak == {"b-quota": 4}, recorder.peak
    assert recorder.regions == {"east": 0, "west": 0}, recorder.regions
    assert await job_counts(cluster.pg) == {"succeeded": len(jobs)}
    tries = await _tries(cluster.pg, "b-quota")
    assert {outcome for _, _, _, outcome in tries} == {"succeeded"}, tries
    assert len(tries) == len(recorder.launches) == len(jobs)  # no lost try, no re-send

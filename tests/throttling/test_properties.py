"""Property tests over whole simulated runs (issue 5, "Done when").

Each example draws a queue (weighted concurrency, quotas, a rate limit, ordering,
aging, a timezone and time windows) and a workload (weights, quota groups, rate
groups, ordering keys, priorities, run_after, job windows, critical jobs), then
drives the real reconciler on the database with an injected clock, answering
random responses. After every tick it checks, from the database and from the
target's launch records:

- capacity (weight units) and every quota group's floor(share x concurrency);
- at most one running job per ordering key, and a job of key K launches only
  once every job of K before it (by enqueue-time run_at) has ended (strict order);
- the rate limit in every sliding window of ``per_seconds``;
- no launch while the job's window is closed (an independent oracle);

and at the end, with time moving on and every job answered, that every job has
launched and ended (no starvation). A second property checks aging: a
low-priority job launches although higher-priority jobs keep coming.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from hipq.bodies import EnqueueRequest
from hipq.jobs import Job, Ordering
from hipq.store import Store
from hipq.testing import FakeClock
from tests.throttling._helpers import Harness, fresh_id, window_open

PROPERTY_SETTINGS = settings(
    # no shrinking or explaining: whole runs are slow to replay (the draws of a
    # failing example are printed as they are)
    max_examples=20, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

ZONES = ["UTC", "Europe/Berlin", "America/New_York"]
# ordinary days, and an hour or two before each DST change of 2026
STARTS = [datetime(2026, 1, 5, 9, tzinfo=UTC), datetime(2026, 6, 15, 21, tzinfo=UTC),
          datetime(2026, 3, 29, 0, tzinfo=UTC), datetime(2026, 10, 25, 0, tzinfo=UTC),
          datetime(2026, 3, 8, 5, tzinfo=UTC), datetime(2026, 11, 1, 4, tzinfo=UTC)]
ADVANCES = [0, 5, 30, 120, 600, 1800]
ACTIONS = ["wait", "wait", "succeeded", "succeeded", "failed"]
MAX_RUNNING = 8 + 3  # the largest concurrency plus critical_concurrency drawn below


@st.composite
def clock_times(draw: st.DrawFn) -> str:
    return f"{draw(st.integers(0, 23)):02d}:{draw(st.sampled_from([0, 30])):02d}"


@st.composite
def windows(draw: st.DrawFn) -> list[dict[str, str]]:
    out = []
    for _ in range(draw(st.integers(1, 2))):
        start = draw(clock_times())
        end = draw(clock_times().filter(lambda e, s=start: e != s))  # type: ignore[misc]
        out.append({"start": start, "end": end})
    return out


@dataclass
class Plan:
    """What the example's queue allows, to check against."""

    concurrency: int
    critical: int
    caps: dict[str, int] | None  # quota group -> cap (None: no quotas)
    rate: dict[str, Any] | None
    timezone: str
    windows: list[dict[str, str]] | None

    def group(self, data: dict[str, Any]) -> str:
        value = data.get("region")
        return value if self.caps is not None and value in self.caps else "*"

    def rate_group(self, data: dict[str, Any]) -> str:
        assert self.rate is not None
        if self.rate.get("by") is None:
            return ""
        value = data.get("api")
        return value if isinstance(value, str) else ""


@dataclass
class Run:
    store: Store
    clock: FakeClock
    data: st.DataObject
    h: Harness = field(init=False)
    plan: Plan = field(init=False)
    order: dict[str, tuple[datetime, str]] = field(default_factory=dict)  # key order
    keys: dict[str, str] = field(default_factory=dict)  # job id -> ordering key
    normal_launches: dict[str, list[datetime]] = field(default_factory=dict)
    seen: int = 0
    ticks: int = 0
    running: list[Job] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    async def setup(self, *, mode: str = "strict") -> None:
        draw = self.data.draw
        self.clock.set(draw(st.sampled_from(STARTS)) + timedelta(
            minutes=draw(st.integers(0, 90))))
        self.h = Harness(self.store, self.clock)
        concurrency = draw(st.integers(3, 8), label="concurrency")
        critical = draw(st.integers(1, 3), label="critical_concurrency")
        settings_: dict[str, Any] = {
            "concurrency": concurrency, "critical_concurrency": critical,
            "attempts": 2, "retry": {"strategy": "fixed",
                                     "delay_seconds": draw(st.sampled_from([0, 10, 60]))},
            "ordering": draw(st.sampled_from(["time_then_priority", "priority_then_time"])),
            "aging_seconds": draw(st.sampled_from([None, 30.0, 300.0])),
            "timezone": draw(st.sampled_from(ZONES)), "ordering_key_mode": mode}
        caps = None
        if draw(st.booleans(), label="quotas"):
            shares = {"a": draw(st.sampled_from([0.4, 0.5])),  # a's cap is at least 1
                      "b": draw(st.sampled_from([0.2, 0.3]))}
            default = draw(st.sampled_from([None, 0.2]))
            settings_["quotas"] = {"field": "region", "shares": shares, "default": default}
            caps = {g: math.floor(share * concurrency) for g, share in shares.items()}
            caps["*"] = (math.floor(default * concurrency) if default is not None
                         else concurrency - sum(caps.values()))
        rate = None
        if draw(st.booleans(), label="rate_limit"):
            rate = {"launches": draw(st.integers(1, 3)),
                    "per_seconds": float(draw(st.sampled_from([20, 60, 120]))),
                    "by": draw(st.sampled_from([None, "api"]))}
            settings_["rate_limit"] = rate
        queue_windows = draw(st.none() | windows(), label="queue windows")
        settings_["time_windows"] = queue_windows
        await self.h.create(fresh_id("prop"), **settings_)
        self.plan = Plan(concurrency=concurrency, critical=critical, caps=caps, rate=rate,
                         timezone=settings_["timezone"], windows=queue_windows)
        await self.enqueue(draw(st.integers(4, 12), label="jobs"))

    def job_request(self) -> EnqueueRequest:
        draw, plan = self.data.draw, self.plan
        groups = ["a", "b", None] if plan.caps is None else [
            g for g in ("a", "b") if plan.caps[g] > 0] + ([None, "c"] if plan.caps["*"] else [])
        region = draw(st.sampled_from(groups))
        critical = draw(st.sampled_from([False] * 7 + [True]))
        cap = plan.critical if critical else plan.concurrency
        if plan.caps is not None and not critical:
            cap = min(cap, plan.caps[plan.group({"region": region})])
        data: dict[str, Any] = {"api": draw(st.sampled_from(["x", "y", None]))}
        if region is not None:
            data["region"] = region
        run_after = draw(st.none() | st.integers(0, 900))
        return EnqueueRequest(
            data=data, weight=draw(st.integers(1, min(cap, 3))), critical=critical,
            priority=draw(st.integers(0, 3)),
            ordering_key=draw(st.sampled_from([None, None, "k1", "k2", "k3"])),
            run_after=None if run_after is None else self.clock.now() + timedelta(
                seconds=run_after),
            time_windows=draw(st.sampled_from([None, None, None]) | windows()),
            timezone=draw(st.sampled_from([None, *ZONES])))

    async def enqueue(self, n: int) -> None:
        items = [(f"j{len(self.ids) + i:03d}", self.job_request()) for i in range(n)]
        for (job_id, _), outcome in zip(items, await self.h.enqueue_many(items), strict=True):
            assert outcome.job is not None
            self.ids.append(job_id)
            if outcome.job.ordering_key is not None:
                self.keys[job_id] = outcome.job.ordering_key
                self.order[job_id] = (outcome.job.run_at, job_id)  # enqueue-time run_at

    # -- one tick and its checks ------------------------------------------------

    async def step(self, *, finishing: bool = False, advance: float | None = None) -> None:
        draw = self.data.draw
        if finishing:
            await self.h.respond_many(self.running)
        else:
            # as many draws whatever runs: the running set also depends on the earlier
            # examples' queues in the store, and hypothesis replays choice sequences
            actions = draw(st.lists(st.sampled_from(ACTIONS), min_size=MAX_RUNNING,
                                    max_size=MAX_RUNNING), label="responses")
            actions = actions[:len(self.running)]
            for status in ("succeeded", "failed"):
                await self.h.respond_many([j for j, a in zip(self.running, actions, strict=True)
                                           if a == status], status)
            if draw(st.sampled_from([False, False, False, True]), label="more jobs"):
                await self.enqueue(draw(st.integers(1, 3)))
        self.clock.advance(draw(st.sampled_from(ADVANCES)) if advance is None else advance)
        await self.h.tick()
        self.ticks += 1
        await self.check()

    async def check(self) -> None:
        plan, now = self.plan, self.clock.now()
        self.running = running = await self.h.running()
        normal = [j for j in running if not j.critical]
        assert sum(j.weight for j in normal) <= plan.concurrency
        assert sum(j.weight for j in running if j.critical) <= plan.critical
        if plan.caps is not None:
            used = Counter[str]()
            for job in normal:
                used[plan.group(job.data)] += job.weight
            for group, units in used.items():
                assert units <= plan.caps[group], (group, dict(used), plan.caps)
        per_key = Counter(j.ordering_key for j in running if j.ordering_key is not None)
        assert max(per_key.values(), default=0) <= 1, per_key
        # (a reconciler also runs the queues of earlier examples whose leases expired)
        new = [j for j in self.h.target.launched[self.seen:] if j.queue == self.h.queue_id]
        self.seen = len(self.h.target.launched)
        live = await self.live_ids() if any(j.ordering_key for j in new) else set()
        for job in new:
            self.check_launch(job, now, live)

    async def live(self) -> list[Job]:
        """The queue's jobs not ended yet (queued or running)."""
        queued = await self.store.job_list_live(
            queue=self.h.queue_id, state="queued", ordering=Ordering.TIME_THEN_PRIORITY,
            limit=1_000_000)
        return queued + await self.store.job_load_running(queue=self.h.queue_id)

    async def live_ids(self) -> set[str]:
        return {job.id for job in await self.live()}

    def check_launch(self, job: Job, now: datetime, live: set[str]) -> None:
        plan = self.plan
        assert job.launched_at == now
        windows_ = job.time_windows if job.time_windows is not None else plan.windows
        tz = job.timezone or plan.timezone
        assert window_open(windows_, tz, now), (job, windows_, tz, now)
        key = job.ordering_key
        if key is not None:
            earlier = [i for i, k in self.keys.items()
                       if k == key and self.order[i] < self.order[job.id]]
            assert not live.intersection(earlier), (
                f"{job} of key {key} launched before {sorted(live.intersection(earlier))} "
                f"ended; order {self.order}")
        if plan.rate is not None and not job.critical:
            times = self.normal_launches.setdefault(plan.rate_group(job.data), [])
            times.append(now)
            window = timedelta(seconds=plan.rate["per_seconds"])
            assert sum(1 for t in times if t > now - window) <= plan.rate["launches"], times

    # -- the end: every job launches and ends -------------------------------------

    async def next_due(self) -> datetime | None:
        """The earliest run_at among queued jobs that head their ordering key."""
        rows = await self.live()
        heads: dict[str, Any] = {}
        for row in rows:
            if row.ordering_key is not None:
                best = heads.get(row.ordering_key)
                if best is None or (row.key_order_at, row.id) < (best.key_order_at, best.id):
                    heads[row.ordering_key] = row
        due = [r.run_at for r in rows if r.status == "queued" and (
            r.ordering_key is None or heads[r.ordering_key].id == r.id)]
        return min(due, default=None)

    async def finish(self) -> None:
        step = self.plan.rate["per_seconds"] if self.plan.rate is not None else 60.0
        for _ in range(150):
            if not self.running:
                due = await self.next_due()
                if due is None:
                    break
                if due > self.clock.now():
                    self.clock.set(due)
                    await self.step(finishing=True, advance=0)
                    continue
            await self.step(finishing=True, advance=step)
        launched = {j.id for j in self.h.target.launched if j.queue == self.h.queue_id}
        starved = sorted(set(self.ids) - launched)
        assert starved == [], ("starved", self.clock.now(), [
            await self.store.job_get(self.h.queue_id, i) for i in starved])
        for job_id in self.ids:
            found = await self.store.job_get(self.h.queue_id, job_id)
            assert found is not None, job_id
            assert found.status.terminal, (job_id, found)


@PROPERTY_SETTINGS
@given(data=st.data())
async def test_throttling_invariants_over_whole_runs(store: Store, clock: FakeClock,
                                                     data: st.DataObject) -> None:
    run = Run(store, clock, data)
    try:
        await run.setup()
        for _ in range(data.draw(st.integers(3, 8), label="ticks")):
            await run.step()
        await run.finish()
    finally:  # out of later examples' way, even after a failure
        harness = getattr(run, "h", None)
        if harness is not None:
            await harness.leave()


@settings(PROPERTY_SETTINGS, max_examples=6)
@given(concurrency=st.integers(1, 3), gap=st.integers(1, 3), aging=st.sampled_from([5.0, 10.0]),
       weight=st.integers(1, 2), start=st.sampled_from(STARTS))
async def test_aging_prevents_starvation_under_a_stream_of_urgent_jobs(
        store: Store, clock: FakeClock, concurrency: int, gap: int, aging: float,
        weight: int, start: datetime) -> None:
    """More priority-0 jobs arrive every tick than can run; a job ``gap`` priority
    numbers worse still launches, ahead of urgent jobs that wait."""
    clock.set(start)
    h = Harness(store, clock)
    await h.create(fresh_id("aging"), concurrency=max(concurrency, weight),
                   ordering="priority_then_time", aging_seconds=aging)
    await h.enqueue("low", priority=gap, weight=weight)
    waiting: set[str] = set()
    try:
        await _stream(h, concurrency, waiting)
    finally:
        await h.leave()


async def _stream(h: Harness, concurrency: int, waiting: set[str]) -> None:
    for n in range(40):
        items = [(f"u{n:02d}-{i}", EnqueueRequest(priority=0)) for i in range(concurrency + 1)]
        await h.enqueue_many(items)
        waiting.update(i for i, _ in items)
        launched = {j.id for j in await h.tick() if j.queue == h.queue_id}
        waiting -= launched
        if "low" in launched:
            assert waiting, "low should overtake urgent jobs still waiting"
            break
        await h.finish_running()
        h.clock.advance(5)
    else:
        raise AssertionError("the low-priority job starved")

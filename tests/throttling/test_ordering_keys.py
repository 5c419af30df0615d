"""Ordering keys (docs/throttling.md; as lowkiq does): at most one running job per key, launched in
enqueue-time run_at order; a failed try being retried holds the later jobs of its
key back (strict) unless the queue says ``ordering_key_mode: relaxed_on_retry``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.throttling._helpers import Harness

RETRY_60 = {"strategy": "fixed", "delay_seconds": 60}


async def _ids(h: Harness) -> list[str]:
    return sorted(j.id for j in await h.running())


async def _settle(h: Harness) -> list[str]:
    """Two ticks: the first applies responses (the ended job still holds its key in
    the database while that tick fetches), the second launches the key's next job."""
    launched = [j.id for j in await h.tick()]
    return launched + [j.id for j in await h.tick()]


async def test_one_running_per_key_in_order(h: Harness) -> None:
    await h.create(concurrency=10)
    for job_id, key in [("k1", "k"), ("m1", "m"), ("k2", "k"), ("free", None), ("k3", "k"),
                        ("m2", "m")]:
        await h.enqueue(job_id, ordering_key=key)
    await h.tick()
    assert await _ids(h) == ["free", "k1", "m1"]
    for _ in range(3):  # nothing else launches while the heads run
        h.clock.advance(5)
        assert await h.tick() == []
    await h.finish_running(["k1"])
    await _settle(h)
    assert await _ids(h) == ["free", "k2", "m1"]
    await h.finish_running()
    await _settle(h)
    assert await _ids(h) == ["k3", "m2"]
    assert [i for i in h.launched_ids() if i.startswith("k")] == ["k1", "k2", "k3"]


async def test_key_order_is_enqueue_time_run_at(h: Harness) -> None:
    await h.create(concurrency=10)
    now = h.clock.now()
    await h.enqueue("late", ordering_key="k", run_after=now + timedelta(seconds=10))
    await h.enqueue("early", ordering_key="k", run_after=now + timedelta(seconds=5))
    await h.enqueue("now", ordering_key="k")
    h.clock.advance(20)
    await h.tick()
    assert await _ids(h) == ["now"]
    await h.finish_running()
    await _settle(h)
    assert await _ids(h) == ["early"]
    await h.finish_running()
    await _settle(h)
    assert await _ids(h) == ["late"]


async def test_a_rescheduled_head_keeps_its_place(h: Harness) -> None:
    """The head of a key, rescheduled because its window closed, holds back the
    key's later (already due) jobs: the order is by enqueue-time run_at."""
    h.clock.set(datetime(2026, 1, 5, 12, tzinfo=UTC))
    await h.create(concurrency=1)
    # x comes first and takes the only slot until head's window has closed
    await h.enqueue("x", run_after=h.clock.now() - timedelta(seconds=1))
    await h.enqueue("head", ordering_key="k",
                    time_windows=[{"start": "12:00", "end": "12:10"}])
    await h.enqueue("next", ordering_key="k")
    await h.tick()
    assert await _ids(h) == ["x"]
    h.clock.set(datetime(2026, 1, 5, 12, 20, tzinfo=UTC))
    await h.finish_running()
    for _ in range(3):
        assert await h.tick() == []
        h.clock.advance(600)
    head = await h.job("head")
    assert head.run_at == datetime(2026, 1, 6, 12, tzinfo=UTC)
    h.clock.set(datetime(2026, 1, 6, 12, tzinfo=UTC))
    assert [j.id for j in await h.tick()] == ["head"]
    await h.finish_running()
    assert await _settle(h) == ["next"]


async def test_strict_mode_holds_the_key_during_a_retry(h: Harness) -> None:
    await h.create(concurrency=10, attempts=3, retry=RETRY_60)
    await h.enqueue("a1", ordering_key="k")
    await h.enqueue("a2", ordering_key="k")
    await h.tick()
    assert await _ids(h) == ["a1"]
    await h.respond((await h.running())[0], status="failed")
    await _settle(h)  # a1 fails and waits 60 s for its retry
    a1 = await h.job("a1")
    assert a1.status == "queued"
    assert a1.attempt == 1
    for _ in range(5):
        h.clock.advance(10)
        await h.tick()
        assert await _ids(h) == [], "a2 must wait for a1's retry"
    h.clock.advance(15)
    await h.tick()
    assert await _ids(h) == ["a1"]
    await h.finish_running()
    await _settle(h)
    assert await _ids(h) == ["a2"]
    assert h.launched_ids() == ["a1", "a1", "a2"]


async def test_relaxed_on_retry_lets_later_jobs_pass_a_retrying_one(h: Harness) -> None:
    await h.create(concurrency=10, attempts=3, retry=RETRY_60,
                   ordering_key_mode="relaxed_on_retry")
    await h.enqueue("a1", ordering_key="k")
    await h.enqueue("a2", ordering_key="k")
    await h.enqueue("a3", ordering_key="k")
    await h.tick()
    await h.respond((await h.running())[0], status="failed")
    await _settle(h)  # a1 waits for its retry; a2 may go at once
    assert await _ids(h) == ["a2"]
    h.clock.advance(61)  # a1's retry is due, but a2 still runs: one per key
    await h.tick()
    assert await _ids(h) == ["a2"]
    await h.finish_running()
    await _settle(h)
    assert await _ids(h) == ["a1"]  # the retry is now the key's head again
    await h.finish_running()
    await _settle(h)
    assert await _ids(h) == ["a3"]
    assert h.launched_ids() == ["a1", "a2", "a1", "a3"]

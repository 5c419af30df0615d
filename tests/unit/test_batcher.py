"""Group commit: concurrent submissions share one call; each answer comes only
after its batch was written; a failed batch fails each of its callers."""

from __future__ import annotations

import asyncio

import pytest

from hipq.responses.batcher import Batcher


async def test_concurrent_submissions_share_one_call() -> None:
    calls: list[list[int]] = []

    async def run(items: list[int]) -> list[int]:
        calls.append(items)
        await asyncio.sleep(0)
        return [i * 10 for i in items]

    batcher: Batcher[int, int] = Batcher(run)
    assert await asyncio.gather(*(batcher.submit(i) for i in range(5))) == [0, 10, 20, 30, 40]
    assert calls == [[0, 1, 2, 3, 4]]
    assert await batcher.submit(7) == 70
    assert calls[-1] == [7]


async def test_submissions_during_a_write_go_in_the_next_batch() -> None:
    release = asyncio.Event()
    calls: list[list[str]] = []

    async def run(items: list[str]) -> list[str]:
        calls.append(items)
        if len(calls) == 1:
            await release.wait()
        return items

    batcher: Batcher[str, str] = Batcher(run, max_batch=2)
    first = asyncio.ensure_future(batcher.submit("a"))
    await asyncio.sleep(0.01)
    later = [asyncio.ensure_future(batcher.submit(x)) for x in "bcd"]
    await asyncio.sleep(0.01)
    assert not first.done()
    release.set()
    assert await first == "a"
    assert [await f for f in later] == ["b", "c", "d"]
    assert calls == [["a"], ["b", "c"], ["d"]]


async def test_a_failed_batch_fails_each_caller_and_the_next_one_runs() -> None:
    failures = [RuntimeError("database down")]

    async def run(items: list[int]) -> list[int]:
        if failures:
            raise failures.pop()
        return items

    batcher: Batcher[int, int] = Batcher(run)
    results = await asyncio.gather(batcher.submit(1), batcher.submit(2),
                                   return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert await batcher.submit(3) == 3
    failures.append(RuntimeError("again"))
    with pytest.raises(RuntimeError):
        await batcher.submit(4)

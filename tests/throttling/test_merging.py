"""Merging (docs/throttling.md; as lowkiq does): ``merge_by_ordering_key`` merges an enqueue into
the still-queued job of its key; payloads accumulate in order; idempotent per job id;
a running job is never merged into."""

from __future__ import annotations

import pytest

from hipq.bodies import EnqueueRequest
from hipq.errors import ConflictError
from hipq.store import InsertStatus
from tests.throttling._helpers import Harness


async def test_payloads_accumulate_in_order(h: Harness) -> None:
    await h.create(concurrency=5, merge_by_ordering_key=True)
    first = await h.enqueue("a", ordering_key="k", data={"n": 1})
    assert first.status is InsertStatus.CREATED
    for n in (2, 3):
        outcome = await h.enqueue(f"m{n}", ordering_key="k", data={"n": n})
        assert outcome.status is InsertStatus.CREATED
    # a batch merges one by one, in order, and other keys stay apart
    await h.enqueue_many([("m4", EnqueueRequest(ordering_key="k", data={"n": 4})),
                          ("o1", EnqueueRequest(ordering_key="other", data={"n": 9})),
                          ("m5", EnqueueRequest(ordering_key="k", data={"n": 5}))])
    await h.enqueue("plain", data={"n": 0})  # no key: never merged
    host = await h.job("a")
    assert host.data == {"payloads": [{"n": n} for n in (1, 2, 3, 4, 5)]}
    assert (await h.job("m3")).id == "a"  # GET of a merged id answers with its host
    assert (await h.job("o1")).data == {"payloads": [{"n": 9}]}
    assert (await h.job("plain")).data == {"n": 0}
    await h.tick()
    launched = {j.id: j.data for j in h.target.launched}
    assert launched["a"] == {"payloads": [{"n": n} for n in (1, 2, 3, 4, 5)]}
    assert sorted(launched) == ["a", "o1", "plain"]


async def test_merge_is_idempotent_per_job_id(h: Harness) -> None:
    await h.create(merge_by_ordering_key=True)
    await h.enqueue("a", ordering_key="k", data={"n": 1})
    await h.enqueue("b", ordering_key="k", data={"n": 2})
    again = await h.enqueue("b", ordering_key="k", data={"n": 2})
    assert again.status is InsertStatus.EXISTS
    assert again.job is not None
    assert again.job.id == "a"
    host_again = await h.enqueue("a", ordering_key="k", data={"n": 1})
    assert host_again.status is InsertStatus.EXISTS
    with pytest.raises(ConflictError):
        await h.enqueue("b", ordering_key="k", data={"n": 3})
    with pytest.raises(ConflictError):
        await h.enqueue("a", ordering_key="k", data={"n": 4})
    assert (await h.job("a")).data == {"payloads": [{"n": 1}, {"n": 2}]}


async def test_a_running_job_is_never_merged_into(h: Harness) -> None:
    await h.create(concurrency=5, merge_by_ordering_key=True)
    await h.enqueue("a", ordering_key="k", data={"n": 1})
    await h.tick()
    assert [j.id for j in await h.running()] == ["a"]
    second = await h.enqueue("b", ordering_key="k", data={"n": 2})
    assert second.status is InsertStatus.CREATED
    assert second.job is not None
    assert second.job.id == "b"
    await h.enqueue("c", ordering_key="k", data={"n": 3})  # merges into b, not a
    assert (await h.job("a")).data == {"payloads": [{"n": 1}]}
    assert (await h.job("b")).data == {"payloads": [{"n": 2}, {"n": 3}]}
    assert (await h.job("c")).id == "b"
    await h.tick()
    assert [j.id for j in await h.running()] == ["a"]  # b waits for its key
    await h.finish_running()
    await h.tick()
    await h.tick()
    assert [j.id for j in await h.running()] == ["b"]
    # an ended job is not merged into either; its id still answers
    await h.finish_running()
    await h.tick()
    await h.enqueue("d", ordering_key="k", data={"n": 4})
    assert (await h.job("d")).data == {"payloads": [{"n": 4}]}
    assert (await h.job("c")).id == "b"
    assert (await h.job("c")).status == "succeeded"


async def test_a_job_waiting_for_a_retry_is_not_merged_into(h: Harness) -> None:
    await h.create(concurrency=5, merge_by_ordering_key=True, attempts=3,
                   retry={"strategy": "fixed", "delay_seconds": 60})
    await h.enqueue("a", ordering_key="k", data={"n": 1})
    await h.tick()
    await h.respond((await h.running())[0], status="failed")
    await h.tick()
    assert (await h.job("a")).status == "queued"
    await h.enqueue("b", ordering_key="k", data={"n": 2})
    assert (await h.job("a")).data == {"payloads": [{"n": 1}]}  # its try already ran
    assert (await h.job("b")).data == {"payloads": [{"n": 2}]}

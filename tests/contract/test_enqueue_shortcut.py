"""A batch's usual items (:class:`~hipq.bodies.DataOnly`, their data's JSON text
handed to the store: :class:`~hipq.jobs.NewJobs`) are stored as their requests are,
on each store, and are the same jobs for idempotency; PostgreSQL's packed text
columns hold any text."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from hipq.bodies import DataOnly, EnqueueRequest
from hipq.config import QueueConfig
from hipq.jobs import Job, NewJobs
from hipq.service import Hipq
from hipq.store import InsertStatus, Store
from hipq.store.pgsql import PACK_SEPARATOR, insert_jobs_call, pack
from hipq.testing import FakeClock

DATA: list[dict[str, Any]] = [
    {}, {"n": 1}, {"z": 1, "a": [True, None, 1.5, -0.0, 1e300], "m": {"b": 1, "a": 2}},
    {"text": "é \x1e \x1f \n \" \\ \u2028 😀", "\x1e": "key with the separator"},
    {"big": 2**63 - 1, "small": -(2**63), "float": math.pi, "one": 1.0},
    {"deep": {"a": {"b": {"c": [[[{}]]]}}}}, {"n": 1},  # the same data twice
]


async def _service(store: Store, clock: FakeClock, *queues: str) -> Hipq:
    service = Hipq(store, clock=clock)
    for queue in queues:
        await service.create_queue(QueueConfig(id=queue))
    return service


def _stored(job: Job) -> Job:
    return job.evolve(queue="", token="")


async def test_data_only_items_are_stored_as_their_requests(store: Store,
                                                            clock: FakeClock) -> None:
    service = await _service(store, clock, "fast", "models")
    ids = [f"j{n}" for n in range(len(DATA))]
    fast = await service.enqueue_many("fast", [(i, DataOnly.of(d))
                                               for i, d in zip(ids, DATA, strict=True)])
    models = await service.enqueue_many("models", [(i, EnqueueRequest(data=d))
                                                   for i, d in zip(ids, DATA, strict=True)])
    assert [o.status for o in fast] == [o.status for o in models] == [InsertStatus.CREATED] * 7
    for job_id in ids:
        got, expected = await store.job_get("fast", job_id), await store.job_get("models", job_id)
        assert got is not None
        assert expected is not None
        assert _stored(got) == _stored(expected)
        assert repr(got.data) == repr(expected.data)  # the same values, 1.0 not 1


@pytest.mark.parametrize("first", ["fast", "models"])
async def test_a_repeat_by_the_other_way_is_the_same_job(store: Store, clock: FakeClock,
                                                         first: str) -> None:
    service = await _service(store, clock, "q")

    def item(job_id: str, data: dict[str, Any], way: str) -> tuple[str, Any]:
        return job_id, DataOnly.of(data) if way == "fast" else EnqueueRequest(data=data)

    other = "models" if first == "fast" else "fast"
    data = {"b": [1, 2], "a": "x"}
    created = await service.enqueue_many("q", [item("a", data, first)])
    assert created[0].status is InsertStatus.CREATED
    again = await service.enqueue_many("q", [item("a", dict(reversed(data.items())), other),
                                             item("a", {"b": [1, 2], "a": "y"}, other)])
    assert [o.status for o in again] == [InsertStatus.EXISTS, InsertStatus.CONFLICT]


async def test_new_jobs_with_repeats_live_and_archived(store: Store, clock: FakeClock) -> None:
    """The store's other ways (a repeat within the batch, a live id, an archived id)
    keep their answers when the jobs come with their data texts."""
    service = await _service(store, clock, "q")
    await service.enqueue_many("q", [("live", DataOnly.of({"n": 1})),
                                     ("gone", DataOnly.of({"n": 2}))])
    await store.job_archive_queued_many(queue="q", ends={"gone": ("cancelled", None)},
                                        now=clock.now())
    outcomes = await service.enqueue_many("q", [
        ("new", DataOnly.of({"n": 3})), ("new", DataOnly.of({"n": 3})),
        ("new", DataOnly.of({"n": 4})), ("live", DataOnly.of({"n": 1})),
        ("live", DataOnly.of({"n": 9})), ("gone", DataOnly.of({"n": 2})),
        ("other", DataOnly.of({"n": 5}))])
    assert [o.status.value for o in outcomes] == [
        "created", "exists", "conflict", "exists", "conflict", "exists", "created"]
    distinct = await service.enqueue_many("q", [  # NewJobs: the guarded INSERT
        ("live", DataOnly.of({"n": 1})), ("gone", DataOnly.of({"n": 0})),
        ("third", DataOnly.of({"n": 6}))])
    assert [o.status.value for o in distinct] == ["exists", "conflict", "created"]
    for job_id, n in (("other", 5), ("third", 6)):
        stored = await store.job_get("q", job_id)
        assert stored is not None
        assert stored.data == {"n": n}


async def test_text_columns_hold_any_text(store: Store, clock: FakeClock) -> None:
    """Values that hold the packing separator, or are empty, are stored as given
    (PostgreSQL sends such a column as an array)."""
    now = clock.now()
    keys = ["a\x1eb", "\x1e", "", "plain", "a\x1e"]
    jobs = [Job(id=f"j{n}", queue="q", run_at=now, created_at=now, updated_at=now,
                token=f"t{n}", body_hash="\x1e" if n else "", data={"k": key},
                ordering_key=key, correlation_key=key or None, correlation_fixed=bool(key))
            for n, key in enumerate(keys)]
    texts = [json.dumps(job.data) for job in jobs]  # JSON text: the separator escaped
    outcomes = await store.job_insert_many(NewJobs(jobs, texts))
    assert {o.status for o in outcomes} == {InsertStatus.CREATED}
    for job in jobs:
        stored = await store.job_get("q", job.id)
        assert stored is not None
        assert (stored.ordering_key, stored.correlation_key, stored.body_hash, stored.data) == (
            job.ordering_key, job.correlation_key, job.body_hash, job.data)


@pytest.mark.parametrize(("texts", "packed"), [
    (["a", "b"], "a\x1eb"), (["a"], "a"), (["", ""], "\x1e"), (["", "b", ""], "\x1eb\x1e"),
    ([""], None), (["a", None], None), (["a\x1e", "b"], None), (["\x1e"], None)])
def test_a_column_packs_only_when_the_server_splits_it_back(texts: list[Any],
                                                            packed: str | None) -> None:
    assert pack(texts) == packed
    if packed is not None:
        assert packed.split(PACK_SEPARATOR) == texts  # what string_to_array gives


def test_the_usual_batch_sends_one_text_per_column(clock: FakeClock) -> None:
    now = clock.now()
    jobs = [Job(id=f"j{n}", queue="q", run_at=now, created_at=now, updated_at=now,
                token=f"t{n}", body_hash=f"h{n}", data={"n": n}) for n in range(3)]
    sql, args = insert_jobs_call(NewJobs(jobs, ['{"n":0}', '{"n":1}', '{"n":2}']),
                                 guarded=False, data_texts=['{"n":0}', '{"n":1}', '{"n":2}'],
                                 packed=True)
    assert "::text[]" not in sql
    assert sql.count("string_to_array(") == 4
    assert args[-4:] == ["j0\x1ej1\x1ej2", "t0\x1et1\x1et2", '{"n":0}\x1e{"n":1}\x1e{"n":2}',
                         "h0\x1eh1\x1eh2"]
    _, plain_args = insert_jobs_call(jobs, guarded=False)  # arrays, data encoded
    assert plain_args[-4:] == [["j0", "j1", "j2"], ["t0", "t1", "t2"],
                               ['{"n": 0}', '{"n": 1}', '{"n": 2}'], ["h0", "h1", "h2"]]

"""Keys cannot be hijacked (docs/security.md, "Poison values and keys"): generated keys live in a
namespace producers cannot set; a key collision fails only the job whose try it blocks; a response
bound to one job's try (a signed callback) applies to no other job."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hipq.bodies import EnqueueRequest, ResponseRequest
from hipq.engine import Reconciler
from hipq.errors import ValidationError
from hipq.jobs import GENERATED_KEY_PREFIX
from hipq.service import Hipq
from hipq.store import Store
from hipq.testing import FakeClock, MemoryTarget
from tests.engine._helpers import enqueue, inbox_outcomes, job, queue, tick


async def test_generated_keys_are_in_their_own_namespace(
        hipq: Hipq, reconciler: Reconciler) -> None:
    await hipq.create_queue(queue())
    await enqueue(hipq, "a")
    await tick(reconciler)
    running = await job(hipq, "a")
    assert running.correlation_key == f"{GENERATED_KEY_PREFIX}{running.token}.1"


async def test_a_producer_cannot_set_a_key_of_the_generated_namespace(hipq: Hipq) -> None:
    await hipq.create_queue(queue())
    with pytest.raises(ValidationError, match="generates"):
        await enqueue(hipq, "a", correlation_key=f"{GENERATED_KEY_PREFIX}abc.2")
    await hipq.create_queue(queue("t", correlation={"request": "{data.key}"}))
    with pytest.raises(ValidationError, match="generates"):
        await hipq.enqueue("t", "b", EnqueueRequest(data={"key": "~abc.1"}))
    [outcome] = await hipq.enqueue_many("t", [("c", EnqueueRequest(data={"key": "~x.1"}))])
    assert outcome.status == "invalid"


async def test_a_taken_key_fails_only_the_job_whose_try_it_blocks(
        hipq: Hipq, store: Store, reconciler: Reconciler, target: MemoryTarget,
        clock: FakeClock) -> None:
    await hipq.create_queue(queue())
    await hipq.create_queue(queue("other"))
    for job_id in ("victim", "bystander"):
        await enqueue(hipq, job_id)
    await enqueue(hipq, "x", queue_id="other")
    victim = await job(hipq, "victim")
    # a row that no producer can write any more (a damaged or hand-edited database)
    squatter = replace(victim, id="squatter", queue="other",
                       correlation_key=f"{GENERATED_KEY_PREFIX}{victim.token}.1",
                       correlation_fixed=True, run_at=clock.now().replace(year=2099),
                       key_order_at=clock.now().replace(year=2099))
    [inserted] = await store.job_insert_many([squatter])
    assert inserted.status == "created"
    result = await tick(reconciler)
    assert {j.id for j in target.launched} == {"bystander", "x"}
    assert result.launched == 2
    failed = await job(hipq, "victim")
    assert failed.status == "failed"
    assert failed.error is not None
    assert failed.error["kind"] == "key_conflict"


@pytest.mark.sql_only  # reads the inbox's rows (inbox_outcomes)
async def test_a_response_bound_to_another_job_is_stale(
        hipq: Hipq, store: Store, reconciler: Reconciler) -> None:
    await hipq.create_queue(queue(correlation={"request": "order-{data.order}"}))
    await enqueue(hipq, "a", data={"order": 7})
    await tick(reconciler)
    running = await job(hipq, "a")
    assert running.correlation_key == "order-7"
    forged = await hipq.report_response("order-7", ResponseRequest(attempt=1, result="x"),
                                        token="a-token-of-another-job")
    await tick(reconciler)
    assert (await job(hipq, "a")).status == "running"
    assert (await inbox_outcomes(store))[forged] == "stale"  # type: ignore[index]
    await hipq.report_response("order-7", ResponseRequest(attempt=1, result="ok"),
                               token=running.token)
    await tick(reconciler)
    done = await job(hipq, "a")
    assert (done.status, done.result) == ("succeeded", "ok")

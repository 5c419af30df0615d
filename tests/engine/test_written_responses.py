"""Responses this process wrote are applied without reading them back (issue 28).

The service hands the inbox rows a batch of responses became to the reconciler once
they are committed (``Hipq(engine=...)``, wired by the daemon); step 0 applies
them from memory, reads the inbox only when told other writers wrote (or once a
second), and its cursor passes the rows handed over, so that read stays O(what
arrived since)."""

from __future__ import annotations

from typing import Any

import pytest

from hipq.bodies import ResponseRequest
from hipq.engine import Reconciler
from hipq.jobs import JobState
from hipq.service import Hipq
from hipq.store import Store
from hipq.testing import FakeClock
from tests.engine._helpers import enqueue, inbox_outcomes, job, queue, respond, tick
from tests.engine.test_tick_cost import Recording

pytestmark = pytest.mark.sql_only  # reads the inbox's rows (inbox_outcomes)


def _wired(store: Store, clock: FakeClock, target: Any) -> tuple[Hipq, Reconciler, Recording]:
    from hipq.config import ReconcileConfig
    from hipq.engine.facade import Engine
    from hipq.targets import Targets

    recording = Recording(store)
    engine = Engine(recording, clock=clock, owner="o1",  # type: ignore[arg-type]
                    config=ReconcileConfig(), targets=Targets(memory={"t": target}))
    hipq = Hipq(store, clock=clock, engine=engine)
    return hipq, engine.reconciler, recording


def _reads(recording: Recording) -> list[str]:
    return [name for name, _ in recording.calls if name.startswith("inbox_pending")]


async def test_a_response_written_here_is_applied_without_a_read(
        store: Store, clock: FakeClock, target: Any) -> None:
    hipq, reconciler, recording = _wired(store, clock, target)
    await hipq.create_queue(queue())
    for job_id in ("a", "b"):
        await enqueue(hipq, job_id)
    await tick(reconciler)  # the first tick reads the inbox (nothing read before)
    await respond(hipq, "a", result={"n": 1})
    await hipq.report_response((await job(hipq, "b")).correlation_key or "",
                               ResponseRequest(status="running", extend_seconds=60))
    recording.calls.clear()
    result = await tick(reconciler)
    assert (result.responses_applied, result.finished) == (2, 1)
    assert _reads(recording) == []
    a = await job(hipq, "a")
    assert (a.status, a.result) == (JobState.SUCCEEDED, {"n": 1})
    assert set((await inbox_outcomes(store)).values()) == {"applied"}
    clock.advance(1)  # once a second the inbox is read all the same (and swept)
    recording.calls.clear()
    await tick(reconciler)
    assert _reads(recording) == ["inbox_pending_scan", "inbox_pending_scan"]


async def test_rows_of_other_writers_are_read_and_the_cursor_passes_ours(
        store: Store, clock: FakeClock, target: Any) -> None:
    hipq, reconciler, recording = _wired(store, clock, target)
    other = Hipq(store, clock=clock)  # another daemon's service: it only writes
    await hipq.create_queue(queue())
    for job_id in ("a", "b", "c"):
        await enqueue(hipq, job_id)
    await tick(reconciler)
    await respond(hipq, "a", result=1)
    await respond(other, "b", result=2)  # written elsewhere: not handed over...
    result = await tick(reconciler)
    assert result.responses_applied == 1
    assert (await job(hipq, "b")).status is JobState.RUNNING
    reconciler.inbox.arrived()  # ...until its writer says so (NOTIFY)
    result = await tick(reconciler)
    assert result.responses_applied == 1
    assert (await job(hipq, "b")).status is JobState.SUCCEEDED
    await respond(hipq, "c", result=3)
    ours = max(await inbox_outcomes(store))
    reconciler.inbox.arrived()
    recording.calls.clear()
    await tick(reconciler)
    assert (await job(hipq, "c")).status is JobState.SUCCEEDED
    assert reconciler.inbox._cursor >= ours  # the read passed the row handed over

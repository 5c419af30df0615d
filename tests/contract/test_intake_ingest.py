"""Ingesting the intake (docs/from-your-database.md, "At ingest"; hipq/intake.py), on each database.

A burst of rows is ingested across ticks without a read between them: a call that
ends on a full batch reads the next one ahead and the next call starts on it. Every
row ends as one job, none is read twice, and a row that commits late with a smaller
id is ingested once the burst ends. A batch is judged row by row as soon as one row
is unstorable or of the wrong JSON types, as the API judges an enqueue."""

from __future__ import annotations

from typing import Any

import pytest

from hipq import intake, sql
from hipq.config import QueueConfig
from hipq.intake import Intake
from hipq.service import Hipq
from hipq.store import Store
from hipq.testing import FakeClock
from tests.contract.test_intake_store import produce


class CountingReads:
    """The store, with its intake reads counted (the rest passes through)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.reads: list[int] = []  # the ``after`` of each read

    async def intake_pending(self, **kwargs: Any) -> Any:
        self.reads.append(kwargs.get("after", 0))
        return await self._store.intake_pending(**kwargs)

    def __getattr__(self, name: str) -> Any:  # typed as Any: passes for a Store
        return getattr(self._store, name)


async def _rows(store: Store, queue: str, ids: list[str]) -> None:
    await produce(store, queue, [{"id": i, "data": {"i": i}} for i in ids])


async def _pending(store: Store, queue: str) -> list[str]:
    rows = await store.intake_pending(queues=[queue], limit=1000)
    return [r.job_id or "" for r in rows]


async def test_a_burst_goes_on_from_the_batch_read_ahead(
        store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(intake, "INGEST_BATCH", 3)
    monkeypatch.setattr(intake, "BATCHES_PER_CALL", 2)
    monkeypatch.setattr(intake, "CHUNK", 2)
    service = Hipq(store, clock=clock)
    await service.create_queue(QueueConfig(id="q"))
    reads = CountingReads(store)
    ingest = Intake(service, reads, clock)
    await _rows(store, "q", [f"j{n}" for n in range(14)])

    assert await ingest.ingest({"q"}, {"q"}) is True  # j0..j5, and j6..j8 read ahead
    assert await _pending(store, "q") == [f"j{n}" for n in range(6, 14)]
    assert len(reads.reads) == 3
    assert reads.reads[0] == 0

    await _rows(store, "q", ["late"])  # commits now, after the ahead was read
    assert await ingest.ingest({"q"}, {"q"}) is True  # starts on the ahead: no read first
    assert reads.reads[3] > 0, "the second call read from the start instead of the ahead"
    assert await _pending(store, "q") == ["j12", "j13", "late"]

    assert await ingest.ingest({"q"}, {"q"}) is False  # the rest, the late row with them
    assert await _pending(store, "q") == []
    jobs = {f"j{n}" for n in range(14)} | {"late"}
    for job_id in jobs:
        assert await store.job_get("q", job_id) is not None
    assert ingest.ingested == len(jobs)  # each row once
    assert await ingest.ingest({"q"}, {"q"}) is False


async def test_a_read_ahead_for_other_queues_is_dropped(
        store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(intake, "INGEST_BATCH", 2)
    monkeypatch.setattr(intake, "BATCHES_PER_CALL", 1)
    service = Hipq(store, clock=clock)
    for queue in ("a", "b"):
        await service.create_queue(QueueConfig(id=queue))
    ingest = Intake(service, store, clock)
    await _rows(store, "a", ["a0", "a1", "a2"])
    await _rows(store, "b", ["b0"])

    assert await ingest.ingest({"a"}, {"a", "b"}) is True  # a2 read ahead for {a}
    assert await ingest.ingest({"b"}, {"a", "b"}) is False  # a lost, b gained
    assert await _pending(store, "a") == ["a2"]  # not ingested by the owner of b
    assert await _pending(store, "b") == []
    assert await ingest.ingest({"a", "b"}, {"a", "b"}) is False
    assert await _pending(store, "a") == []
    ingest.close()


@pytest.mark.sql_only  # a producer's transaction held open
async def test_a_smaller_id_committed_during_a_burst_is_ingested_after_it(
        store: Store, clock: FakeClock, backend: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if backend == "sqlite":
        pytest.skip("a single writer: a transaction holding a row blocks the others")
    monkeypatch.setattr(intake, "INGEST_BATCH", 2)
    monkeypatch.setattr(intake, "BATCHES_PER_CALL", 1)
    service = Hipq(store, clock=clock)
    await service.create_queue(QueueConfig(id="q"))
    ingest = Intake(service, store, clock)
    engine = store.engine  # type: ignore[attr-defined]
    async with engine.connect() as slow:
        held = await slow.begin()
        await sql.enqueue(slow, "q", "slow", {"n": 0})  # the smallest id, not committed
        await _rows(store, "q", [f"j{n}" for n in range(5)])
        assert await ingest.ingest({"q"}, {"q"}) is True  # j0 j1, j2 j3 read ahead
        await held.commit()
    assert await ingest.ingest({"q"}, {"q"}) is True  # j2 j3 (ahead), j4 + ? ahead
    assert await ingest.ingest({"q"}, {"q"}) is False
    assert await ingest.ingest({"q"}, {"q"}) is False  # from the start: finds "slow"
    assert await _pending(store, "q") == []
    assert await store.job_get("q", "slow") is not None
    assert ingest.ingested == 6


@pytest.mark.parametrize("data", [
    '{"deep": ' + "[" * 70 + "]" * 70 + "}",  # deeper than 64 levels
    '{"nul": "a\\u0000b"}',                    # a NUL, escaped
    '{"lone": "\\ud800"}',                     # a lone surrogate, escaped
    '{"big": 9223372036854775808}',            # past 64 bits
    '{"far": 1e400}',                          # past a float
    '{"far": -2E+308}',
])
def test_a_batch_with_an_unstorable_row_is_judged_row_by_row(data: str) -> None:
    """One unstorable row in a batch and every row is judged on its own: the bad
    one refused, the others taken."""
    from datetime import UTC, datetime

    from hipq.intake_rows import requests_of
    from hipq.store.records import IntakeRow

    now = datetime(2026, 1, 5, 12, tzinfo=UTC)
    good = '{"n": 1, "s": "[{ not brackets }]", "f": 1.5e10, "i": 922337203685477580}'
    rows = [IntakeRow(id=i, queue="q", job_id=f"j{i}", data=text, run_after=None,
                      fields="{}", enqueued_at=now)
            for i, text in enumerate([good, data, good])]
    verdicts = requests_of(rows)
    assert [problem is None for problem, _ in verdicts] == [True, False, True]
    assert requests_of([rows[0], rows[2]])[0][0] is None  # the plain batch: taken whole


@pytest.mark.parametrize(("fields", "where"), [
    ('{"critical": 0}', "critical"),     # 0 is not false, as over the API
    ('{"priority": "5"}', "priority"),   # "5" is not 5
])
def test_fields_of_the_wrong_json_type_are_refused_as_the_api_refuses_them(
        fields: str, where: str) -> None:
    from datetime import UTC, datetime

    from hipq.intake_rows import requests_of
    from hipq.store.records import IntakeRow

    now = datetime(2026, 1, 5, 12, tzinfo=UTC)
    rows = [IntakeRow(id=1, queue="q", job_id="ok", data="{}", run_after=None,
                      fields='{"critical": true, "priority": 5}', enqueued_at=now),
            IntakeRow(id=2, queue="q", job_id="bad", data="{}", run_after=None,
                      fields=fields, enqueued_at=now)]
    (ok, _), (problem, item) = requests_of(rows)
    assert ok is None
    assert item is None
    assert problem is not None
    assert where in problem

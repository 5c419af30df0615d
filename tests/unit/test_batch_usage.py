"""The batch's kept sums (weights, ordering keys, quota field values) always equal
what summing its running jobs gives, whatever joins, ends and leaves, and whether
the entries let their jobs go at a tick (read back, as the reconciler does, when a
new quota field needs them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from hipq.engine.batch import Batch
from hipq.engine.held import HeldTry, Outcome
from hipq.jobs import Job, JobState
from hipq.plugins import RunningUsage

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
QUEUES = ["q1", "q2"]
PATHS = [None, "region", "tenant.id"]

job_fields = st.fixed_dictionaries({
    "queue": st.sampled_from(QUEUES),
    "id": st.sampled_from(["j0", "j1", "j2"]),
    "weight": st.integers(1, 3),
    "critical": st.booleans(),
    "ordering_key": st.sampled_from([None, "k1", "k2"]),
    "data": st.sampled_from([{}, {"region": "east"}, {"region": "west"}, {"region": 7},
                             {"tenant": {"id": "a"}}, {"region": None}]),
    "attempt": st.integers(1, 2),
})
operations = st.lists(st.one_of(
    st.tuples(st.just("add"), job_fields, st.booleans()),
    st.tuples(st.just("end"), st.sampled_from(QUEUES), st.integers(0, 2)),
    st.tuples(st.just("remove"), st.sampled_from(QUEUES), st.integers(0, 2)),
    st.tuples(st.just("remove_many"), st.sampled_from(QUEUES), st.integers(0, 2)),
    st.tuples(st.just("drop"), st.sampled_from(QUEUES), st.just(0)),
    st.tuples(st.just("usage"), st.sampled_from(QUEUES), st.sampled_from(PATHS)),
    st.tuples(st.just("tick"), st.sampled_from(QUEUES), st.just(0)),
    st.tuples(st.just("keep"), st.sampled_from(QUEUES), st.booleans()),
), max_size=60)


class Model:
    """The batch, and every job it was given (what a read back would return)."""

    def __init__(self) -> None:
        self.batch = Batch()
        self.jobs: dict[tuple[str, str], Job] = {}

    def usage(self, queue: str, path: str | None) -> RunningUsage:
        """As the reconciler asks: the jobs the batch wants read back first."""
        wanted = self.batch.wants_jobs(queue, path)
        self.batch.attach(queue, [self.jobs[(queue, i)] for i in wanted])
        return self.batch.usage(queue, path)

    def summed(self, queue: str, path: str | None) -> RunningUsage:
        live = [self.jobs[(queue, e.id)] for e in self.batch.entries(queue)
                if e.outcome is None]
        return RunningUsage.of(live, path)


def same(kept: RunningUsage, expected: RunningUsage) -> bool:
    return (kept.normal_weight, kept.critical_weight, set(kept.ordering_keys),
            kept.field_path, dict(kept.field_weights)) == (
        expected.normal_weight, expected.critical_weight, set(expected.ordering_keys),
        expected.field_path, dict(expected.field_weights))


@settings(max_examples=500, deadline=None)
@given(first=st.sampled_from(PATHS), ops=operations)
def test_kept_sums_equal_the_sums_over_the_running_jobs(
        first: str | None, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    model = Model()
    batch = model.batch
    paths: dict[str, str | None] = dict.fromkeys(QUEUES, first)
    for queue in QUEUES:  # counts kept from the start (the usual case)
        model.usage(queue, first)
    for op in ops:
        if op[0] == "add":
            fields, ended = op[1], op[2]
            job = Job(run_at=NOW, created_at=NOW, updated_at=NOW, status=JobState.RUNNING,
                      deadline=NOW + timedelta(seconds=30), **fields)
            entry = HeldTry(job=job, deadline=job.deadline)
            if ended:
                entry.outcome = Outcome(status=JobState.SUCCEEDED)
            model.jobs[job.key] = job
            batch.add(entry)
            continue
        queue, arg = op[1], op[2]
        if op[0] == "usage":
            paths[queue] = arg
            assert same(model.usage(queue, arg), model.summed(queue, arg))
            continue
        key = (queue, f"j{arg}")
        entry = batch.get(key)
        if op[0] == "end" and entry is not None and entry.outcome is None:
            batch.end(entry, Outcome(status=JobState.FAILED))
        elif op[0] == "remove":
            batch.remove(key)
        elif op[0] == "remove_many":
            batch.remove_many([key])
        elif op[0] == "drop":
            batch.drop_queue(queue)
        elif op[0] == "tick":
            assert batch.overdue(NOW) == []
        elif op[0] == "keep":
            batch.keep_jobs(queue, arg)
    for queue in QUEUES:
        path = paths.get(queue)
        assert same(model.usage(queue, path), model.summed(queue, path))
        for other in PATHS:
            assert same(model.usage(queue, other), model.summed(queue, other))
        batch.keep_jobs(queue, True)
        model.usage(queue, None)  # a queue that keeps jobs has them all back
        assert len(batch.running(queue)) == len(
            [e for e in batch.entries(queue) if e.outcome is None])

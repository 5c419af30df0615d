"""The engine's pure decisions, without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hipq.engine.decide import (
    Fetch,
    change_for,
    drop_ends,
    extended_deadline,
    inbox_verdict,
    outcome_from_launch,
    outcome_from_row,
    outcome_timeout,
    plan_fetch,
    sift_decision,
    unique_jobs,
)
from hipq.engine.held import HeldTry
from hipq.jobs import DeliveryStrategy, ErrorKind, Job, JobError, JobState, Ordering
from hipq.plugins import GiveUp, Retry, RetryContext, RunningUsage, ThrottleResult
from hipq.spec import QueueSpec, QuotaSpec, RateLimitSpec
from hipq.store.records import ChangeKind, InboxOutcome, InboxRow
from hipq.targets.interface import Completed

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def job(id: str, **fields: object) -> Job:
    values: dict[str, object] = {"queue": "q", "run_at": NOW, "created_at": NOW,
                                 "updated_at": NOW, "max_attempts": 3, **fields}
    return Job(id=id, **values)  # type: ignore[arg-type]


def row(**fields: object) -> InboxRow:
    values: dict[str, object] = {"id": 1, "correlation_key": "k", "attempt": None,
                                 "status": "succeeded", "retryable": None, "result": None,
                                 "error": None, "extend_seconds": None, "source": "api",
                                 "received_at": NOW, **fields}
    return InboxRow(**values)  # type: ignore[arg-type]


def test_plan_is_bounded_by_free_capacity() -> None:
    spec = QueueSpec(id="q", concurrency=5, critical_concurrency=2)
    running = [job("a", weight=2), job("b", critical=True)]
    assert plan_fetch(spec, RunningUsage.of(running), 100) == [Fetch(limit=3),
                                                      Fetch(limit=1, critical_only=True)]


def test_plan_without_room_fetches_nothing() -> None:
    spec = QueueSpec(id="q", concurrency=1, critical_concurrency=0)
    assert plan_fetch(spec, RunningUsage.of([job("a")]), 100) == []


def test_plan_fetches_each_quota_group_with_room() -> None:
    spec = QueueSpec(id="q", concurrency=10, critical_concurrency=0,
                     quotas=QuotaSpec(field="region", shares={"east": 0.5, "west": 0.3}))
    running = [job(f"e{i}", data={"region": "east"}) for i in range(5)]
    assert plan_fetch(spec, RunningUsage.of(running, "region"), 100) == [
        Fetch(limit=3, group="west"),
        Fetch(limit=2, default_group_excluding=("east", "west"))]


def test_plan_looks_wider_with_a_rate_limit_per_group_and_older_jobs_with_aging() -> None:
    spec = QueueSpec(id="q", concurrency=2, critical_concurrency=0, aging_seconds=10,
                     ordering=Ordering.PRIORITY_THEN_TIME,
                     rate_limit=RateLimitSpec(launches=1, per_seconds=60, by="tenant"))
    assert plan_fetch(spec, RunningUsage.of([]), 50) == [
        Fetch(limit=50), Fetch(limit=2, ordering=Ordering.TIME_THEN_PRIORITY)]


def test_unique_jobs_keeps_the_first_of_each() -> None:
    a, b = job("a"), job("b")
    assert unique_jobs([[a, b], [b, job("a")]]) == [a, b]


def test_sift_keeps_the_decision_to_the_candidates() -> None:
    a, b, c = job("a"), job("b"), job("c")
    decision = ThrottleResult(launch=[a, a, job("stranger")],
                              reschedule={"a": NOW, "b": NOW, "x": NOW},
                              drop={"b": "no", "c": "expired"})
    sifted = sift_decision([a, b, c], decision)
    assert sifted.launch == ["a"]
    assert sifted.reschedule == {"b": NOW}
    assert sifted.drop == {"c": "expired"}
    assert drop_ends(sifted.drop) == {
        "c": ("expired", {"kind": "dropped", "detail": "expired"})}


def test_verdicts_of_responses() -> None:
    entry = HeldTry(job=job("a", attempt=2, launched_at=NOW), deadline=None)
    assert inbox_verdict(entry, row(attempt=1)) is InboxOutcome.STALE
    assert inbox_verdict(entry, row(received_at=NOW - timedelta(seconds=1))) \
        is InboxOutcome.LATE
    assert inbox_verdict(entry, row(attempt=2)) is None
    entry.outcome = outcome_timeout(NOW)
    assert inbox_verdict(entry, row(attempt=2)) is InboxOutcome.DUPLICATE


def test_a_heartbeat_never_shortens_the_deadline() -> None:
    entry = HeldTry(job=job("a", timeout_seconds=30), deadline=NOW + timedelta(hours=1))
    assert extended_deadline(entry, row(extend_seconds=5), None, NOW) == entry.deadline
    entry.deadline = None
    assert extended_deadline(entry, row(), 60, NOW) == NOW + timedelta(seconds=60)
    assert extended_deadline(entry, row(), None, NOW) == NOW + timedelta(seconds=30)


def test_outcomes_from_targets_and_rows() -> None:
    ok = outcome_from_launch(Completed(status="succeeded", result=7), None)
    assert (ok.status, ok.result) == (JobState.SUCCEEDED, 7)
    failed = outcome_from_launch(None, JobError(kind=ErrorKind.TRANSPORT, detail="refused"))
    assert failed.error is not None
    assert failed.error.data == {"kind": "transport", "detail": "refused"}
    final = outcome_from_row(row(status="failed", retryable=False, error={"detail": "bad"}))
    assert final.error is not None
    assert (final.error.kind, final.error.retryable) == ("response_failed", False)
    assert outcome_from_row(row(status="cancelled")).status is JobState.CANCELLED


def test_changes_follow_the_retry_rules() -> None:
    spec = QueueSpec(id="q", delivery_strategy=DeliveryStrategy.AT_MOST_ONCE)
    later = NOW + timedelta(seconds=9)

    def retry(ctx: RetryContext) -> Retry | GiveUp:
        return Retry(at=later)

    timed_out = HeldTry(job=job("a", attempt=1), deadline=NOW, outcome=outcome_timeout(NOW))
    change = change_for(timed_out, spec, retry, NOW)
    assert (change.kind, change.status) == (ChangeKind.ARCHIVE, "failed")
    failed = HeldTry(job=job("b", attempt=1), deadline=None,
                   outcome=outcome_from_row(row(status="failed")))
    change = change_for(failed, spec, retry, NOW)
    assert (change.kind, change.run_at) == (ChangeKind.REQUEUE, later)
    assert change_for(failed, None, None, NOW).error == {
        "kind": "response_failed", "detail": "", "gave_up": "the queue no longer exists"}
    extended = HeldTry(job=job("c", attempt=1), deadline=later, inbox_ids=[4])
    change = change_for(extended, spec, retry, NOW)
    assert (change.kind, change.deadline, change.inbox_ids) == (ChangeKind.EXTEND, later, (4,))

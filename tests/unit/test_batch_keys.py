"""The batch finds a try by its correlation key without keeping hipq's own keys
(``~token.attempt`` is made again from the token): only the live try's key
matches, a producer's key is kept as given, and so is a key that does not follow
the pattern."""

from __future__ import annotations

from datetime import UTC, datetime

from hipq.engine.batch import Batch
from hipq.engine.held import HeldTry
from hipq.jobs import Job, JobState

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def running(job_id: str, key: str | None, *, token: str = "tok", attempt: int = 2) -> HeldTry:
    job = Job(id=job_id, queue="q", status=JobState.RUNNING, run_at=NOW, created_at=NOW,
              updated_at=NOW, token=token, attempt=attempt, correlation_key=key,
              correlation_fixed=key is not None and not key.startswith("~"))
    return HeldTry(job=job, deadline=None)


def test_own_keys_are_made_again_and_match_only_the_live_try() -> None:
    batch = Batch()
    own = running("a", "~tok.2")
    batch.add(own)
    assert own.correlation_key == "~tok.2"
    assert not own.fixed_key
    assert batch.by_key("~tok.2") is own
    for other in ("~tok.1", "~tok.02", "~tok", "~tok.2.", "~other.2", "tok.2", "~.2"):
        assert batch.by_key(other) is None, other
    batch.remove(("q", "a"))
    assert batch.by_key("~tok.2") is None


def test_producer_keys_and_odd_keys_are_kept_as_given() -> None:
    batch = Batch()
    fixed = running("f", "order-7:v2", token="t1")
    odd = running("o", "~t2.9", token="t2")  # not this try's pattern: kept as is
    none = running("n", None, token="t3")
    for entry in (fixed, odd, none):
        batch.add(entry)
    assert (fixed.fixed_key, odd.fixed_key, none.fixed_key) == (True, False, False)
    assert batch.by_key("order-7:v2") is fixed
    assert batch.by_key("~t2.9") is odd
    assert batch.by_key("~t2.2") is None
    assert batch.by_key("~t3.2") is None
    assert (odd.correlation_key, none.correlation_key) == ("~t2.9", None)


def test_a_later_entry_of_the_same_job_takes_the_token_over() -> None:
    batch = Batch()
    first, second = running("a", "~tok.1", attempt=1), running("a", "~tok.2", attempt=2)
    batch.add(first)
    batch.add(second)  # the same (queue, id): the first leaves
    assert batch.by_key("~tok.1") is None
    assert batch.by_key("~tok.2") is second

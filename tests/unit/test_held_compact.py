"""A held try's compact form (docs/benchmarks.md, "Idle memory"): its rarely set
fields live in a part made on demand and dropped once they are all back to their
defaults, and a large batch keeps a waiting try's token as a number. Neither shows
to a reader: every field reads and writes as the plain attribute it was."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import pytest

from hipq.engine import batch as batch_module
from hipq.engine.batch import Batch
from hipq.engine.held import HeldTry, Outcome, token_number
from hipq.jobs import JobState, generated_key
from hipq.testing import claimed_jobs

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
RARE = {"job": None, "outcome": None, "inbox_ids": (), "dirty": False, "value": None,
        "scope": None, "trace": None, "ordering_key": None}


def _held() -> HeldTry:
    job = claimed_jobs(1, at=NOW)[0]
    return HeldTry(job=job, deadline=job.deadline)


def test_a_plain_waiting_try_is_small_and_reads_its_defaults() -> None:
    held = _held()
    held.job = None
    assert {name: getattr(held, name) for name in RARE} == RARE
    assert held.waiting
    assert sys.getsizeof(held) <= 128  # 12 slots (19 before: 192 bytes)
    assert held._rare is None  # the rare part went with the job


@pytest.mark.parametrize(("name", "value"), [
    ("outcome", Outcome(status=JobState.SUCCEEDED)), ("inbox_ids", (3, 4)),
    ("dirty", True), ("value", ""), ("value", "eu"), ("scope", "tenant-1"),
    ("trace", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
    ("ordering_key", "k")])
def test_each_rare_field_reads_back_what_was_set_and_its_default_after(
        name: str, value: object) -> None:
    held = _held()
    held.job = None
    setattr(held, name, value)
    assert getattr(held, name) == value
    assert {n: getattr(held, n) for n in RARE if n != name} == {
        n: d for n, d in RARE.items() if n != name}  # the others keep their defaults
    setattr(held, name, RARE[name])
    assert getattr(held, name) == RARE[name]
    assert held._rare is None


def test_fields_of_the_job_and_a_new_try_are_kept() -> None:
    job = claimed_jobs(1, at=NOW)[0].evolve(ordering_key="k", trace="t")
    held = HeldTry(job=job, deadline=None, outcome=Outcome(status=JobState.FAILED),
                   inbox_ids=[7])
    assert (held.job, held.ordering_key, held.trace, held.inbox_ids) == (job, "k", "t", (7,))
    assert held.outcome == Outcome(status=JobState.FAILED)
    assert not held.waiting
    held.inbox_ids += (8,)
    held.job = None
    assert (held.ordering_key, held.inbox_ids) == ("k", (7, 8))  # the part stays


@pytest.mark.parametrize("token", ["0123456789abcdef0123456789abcdef",
                                   "f" * 32, "00000000000000000000000000000a00"])
def test_a_hex_token_is_one_number(token: str) -> None:
    number = token_number(token)
    assert number is not None
    assert f"{number:032x}" == token


@pytest.mark.parametrize("token", ["", "abc", "0123456789ABCDEF0123456789abcdef",
                                   "0x23456789abcdef0123456789abcdef",
                                   " 123456789abcdef0123456789abcdef",
                                   "_123456789abcdef0123456789abcdef",
                                   "g123456789abcdef0123456789abcdef",
                                   "0123456789abcdef0123456789abcdef0", "1" * 32])
def test_another_token_stays_a_string(token: str) -> None:
    assert token_number(token) is None


def _waiting_batch(n: int, *, tokens: list[str] | None = None) -> tuple[Batch, list[HeldTry]]:
    batch = Batch()
    jobs = claimed_jobs(n, at=NOW)
    if tokens is not None:
        jobs = [j.evolve(token=t, correlation_key=generated_key(t, 1))
                for j, t in zip(jobs, tokens, strict=True)]
    tries = [HeldTry(job=j, deadline=j.deadline) for j in jobs]
    for held in tries:
        batch.add(held)
    assert batch.overdue(NOW) == []
    return batch, tries


def test_a_large_batch_keeps_waiting_tokens_as_numbers_and_finds_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_module, "COMPACT_TOKENS_FROM", 3)
    odd = ["Not-Hex_token-0123456789abcdefgh", "0123456789ABCDEF0123456789ABCDEF"]
    tokens = [*odd, *(f"{i:032x}" for i in range(0xa0, 0xa3))]
    batch, tries = _waiting_batch(5, tokens=tokens)
    assert [type(h.token_key) for h in tries] == [str, str, int, int, int]
    assert [h.token for h in tries] == tokens  # reads as it was
    for held in tries:
        assert batch.by_key(generated_key(held.token, 1)) is held
        assert batch.by_key(generated_key(held.token, 2)) is None  # another attempt
    assert batch.by_key(generated_key(tokens[2].upper(), 1)) is None
    batch.end(tries[2], Outcome(status=JobState.SUCCEEDED))
    assert batch.changed() == [tries[2]]
    batch.remove_many([(h.queue, h.id) for h in tries[1:3]])
    assert batch.by_key(generated_key(tokens[2], 1)) is None
    assert batch.by_key(generated_key(tokens[1], 1)) is None
    assert batch.by_key(generated_key(tokens[3], 1)) is tries[3]


def test_a_small_batch_keeps_its_tokens_as_given() -> None:
    batch, tries = _waiting_batch(3)
    assert all(isinstance(h.token_key, str) for h in tries)
    assert all(batch.by_key(generated_key(h.token, 1)) is h for h in tries)


def test_an_extended_try_keeps_its_number_and_its_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_module, "COMPACT_TOKENS_FROM", 1)
    batch, (held,) = _waiting_batch(1)
    token = held.token
    batch.extend(held, NOW + timedelta(days=3), inbox_id=5)
    assert (held.dirty, held.inbox_ids) == (True, (5,))
    assert batch.overdue(NOW + timedelta(days=2)) == []
    batch.settle((held.queue, held.id), NOW + timedelta(days=3))
    assert (held.dirty, held.inbox_ids, held.token) == (False, (), token)
    assert batch.by_key(generated_key(token, 1)) is held
    assert batch.overdue(NOW + timedelta(days=4)) == [held]


def test_an_adopted_try_keeps_its_token_as_a_number_from_the_start() -> None:
    """Its job is let go as it is added, so its token string dies with the row read."""
    batch = Batch()
    adopted, claimed = (HeldTry(job=j, deadline=j.deadline) for j in claimed_jobs(2, at=NOW))
    batch.add(adopted, keep_job=False)
    batch.add(claimed)
    assert (type(adopted.token_key), type(claimed.token_key)) == (int, str)
    assert batch.by_key(generated_key(adopted.token, 1)) is adopted
    assert batch.by_key(generated_key(claimed.token, 1)) is claimed

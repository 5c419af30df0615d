"""A batch's :class:`~hipq.service.JobBuilder` makes of a
:class:`~hipq.bodies.DataOnly` item exactly the job (or the error) that
:func:`~hipq.service.build_job` makes of ``EnqueueRequest(data=...)``, under any
queue settings; and hands the store the data texts only when each job has its own."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipq.bodies import DataOnly, EnqueueRequest
from hipq.config import QueueConfig, TimeWindow
from hipq.errors import ValidationError
from hipq.jobs import Job, NewJobs
from hipq.service import JobBuilder, build_job

_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
                max_size=4)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8)
datas = st.dictionaries(st.sampled_from(["n", "tenant", "a", "b", ""]) | _TEXT,
                        _VALUES | st.dictionaries(st.just("id"), _TEXT), max_size=4)
ids = st.from_regex(r"[A-Za-z0-9_:-][A-Za-z0-9_.:-]{0,11}", fullmatch=True)
_WINDOWS = [None, [{"start": "09:00", "end": "17:00"}], [{"start": "22:00", "end": "02:00"}]]


@st.composite
def configs(draw: st.DrawFn) -> QueueConfig:
    concurrency = draw(st.sampled_from([None, 1, 4]))
    raw: dict[str, Any] = {
        "id": "q", "attempts": draw(st.integers(1, 5)), "concurrency": concurrency,
        "default_weight": draw(st.integers(1, concurrency or 3)),
        "timezone": draw(st.sampled_from(["UTC", "Europe/Paris", "Pacific/Kiritimati"])),
        "time_windows": draw(st.sampled_from(_WINDOWS)),
        "timeout_seconds": draw(st.sampled_from([1.5, 86400.0])),
        "merge_by_ordering_key": draw(st.booleans()),
    }
    if concurrency is not None and draw(st.booleans()):
        raw["quotas"] = {"field": draw(st.sampled_from(["tenant", "a.id", "n"])),
                         "shares": {"x": 0.5}}
    if draw(st.booleans()):
        raw["correlation"] = {"request": draw(st.sampled_from(
            ["{data[tenant]}", "~{id}", "k-{id}", "{data[n]}"]))}
    config = QueueConfig.model_validate(raw)
    if draw(st.booleans()):  # settings no queue accepts: the defaults make no job
        config = config.model_copy(update=draw(st.sampled_from([
            {"concurrency": 1, "default_weight": 2},
            {"time_windows": [TimeWindow(start="09:00", end="09:00")]}])))
    return config


def _general(config: QueueConfig, now: datetime) -> Any:
    def build(job_id: str, request: EnqueueRequest, token: str, trace: str | None) -> Job:
        return build_job(config, job_id, request, now, token=token, trace=trace)
    return build


def _outcome(build: Any, *args: Any) -> Any:
    """The job, or ("invalid", the error)."""
    try:
        return build(*args)
    except ValidationError as exc:
        return ("invalid", str(exc))


@settings(max_examples=400, deadline=None)
@given(config=configs(), items=st.lists(st.tuples(ids, datas), min_size=1, max_size=4),
       trace=st.sampled_from([None, "00-" + "1" * 32 + "-" + "2" * 16 + "-01"]),
       minutes=st.integers(0, 24 * 60))
def test_a_data_only_item_makes_build_jobs_job(config: QueueConfig,
                                               items: list[tuple[str, dict[str, Any]]],
                                               trace: str | None, minutes: int) -> None:
    now = datetime(2026, 3, 29, tzinfo=UTC) + timedelta(minutes=minutes)
    build = JobBuilder(config, now)
    for n, (job_id, data) in enumerate(items):
        token = f"{n:032x}"
        got = _outcome(build, job_id, DataOnly.of(data), token, trace)
        expected = _outcome(_general(config, now), job_id, EnqueueRequest(data=data), token,
                            trace)
        assert got == expected
        if not isinstance(got, tuple):
            assert json.dumps(got.data) == json.dumps(expected.data)  # 1 is not True


def test_the_store_gets_the_texts_only_when_every_job_has_its_own() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    config = QueueConfig(id="q")
    build = JobBuilder(config, now)
    items = [DataOnly.of({"n": n, "a": [n]}) for n in range(3)]
    jobs = [build(f"j{n}", item, f"{n:032x}", None) for n, item in enumerate(items)]
    batch = build.new_jobs(jobs)
    assert isinstance(batch, NewJobs)
    assert list(batch) == jobs
    assert batch.data_texts == ['{"a":[0],"n":0}', '{"a":[1],"n":1}', '{"a":[2],"n":2}']
    assert all(job.data is item.data for job, item in zip(batch, items, strict=True))
    build("m", EnqueueRequest(data={"n": 9}), "f" * 32, None)  # a job without a text
    assert type(build.new_jobs(jobs)) is list
    correlated = JobBuilder(QueueConfig(id="q", correlation={"request": "k-{id}"}), now)
    job = correlated("j", DataOnly.of({}), "0" * 32, None)
    assert job.correlation_key == "k-j"
    assert type(correlated.new_jobs([job])) is list


def test_the_defaults_error_is_each_items() -> None:
    config = QueueConfig(id="q", concurrency=1).model_copy(update={"default_weight": 2})
    build = JobBuilder(config, datetime(2026, 1, 1, tzinfo=UTC))
    for job_id in ("a", "b"):
        with pytest.raises(ValidationError, match="weight 2 is larger than the queue's"):
            build(job_id, DataOnly.of({}), "0" * 32, None)


@pytest.mark.parametrize("settings", [
    {"concurrency": 4, "quotas": {"field": "a.id", "shares": {"x": 0.5}}},
    {"time_windows": [{"start": "09:00", "end": "17:00"}], "timezone": "Europe/Paris"},
    {"correlation": {"request": "k-{data[a][id]}"}},
    {"correlation": {"request": "~{id}"}},
    {"default_weight": 3, "timeout_seconds": 5, "attempts": 7}])
def test_each_setting_makes_the_same_job(settings: dict[str, Any]) -> None:
    config = QueueConfig.model_validate({"id": "q", **settings})
    now = datetime(2026, 1, 1, 20, tzinfo=UTC)
    data = {"a": {"id": "tenant-1"}, "n": 1}
    got = _outcome(JobBuilder(config, now), "j", DataOnly.of(data), "0" * 32, None)
    assert got == _outcome(_general(config, now), "j", EnqueueRequest(data=data), "0" * 32, None)

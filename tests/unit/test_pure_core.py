"""The pure core's seams: retry settings reach hipq.retry as a frozen RetrySpec (no
pydantic), and the lazy package ``__init__``s still give every public name."""

from __future__ import annotations

import dataclasses
import importlib
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest

from hipq.config import QueueConfig, RetryConfig
from hipq.jobs import Job, JobError
from hipq.plugins import Retry, RetryContext
from hipq.retry import build_retry
from hipq.spec import QueueSpec, RetrySpec

NOW = datetime(2024, 1, 1, tzinfo=UTC)


def _queue(retry: dict[str, object]) -> QueueConfig:
    return QueueConfig.model_validate({"id": "q", "retry": retry,
                                       "target": {"kind": "memory", "name": "t"}})


def _ctx(attempt: int = 3) -> RetryContext:
    job = Job(queue="q", id="j", attempt=attempt, max_attempts=10, run_at=NOW,
              created_at=NOW, updated_at=NOW)
    return RetryContext(job=job, error=JobError(kind="transport"), now=NOW)


def test_the_queue_spec_carries_the_retry_settings_with_flat_options_merged() -> None:
    spec = _queue({"strategy": "fixed", "delay_seconds": 1,
                   "options": {"delay_seconds": 7}}).to_spec()
    assert spec.retry.strategy == "fixed"
    assert spec.retry.plugin is None
    assert dict(spec.retry.options) == {"delay_seconds": 7}  # options win, as all_options
    assert spec.retry == RetryConfig.model_validate(
        {"strategy": "fixed", "options": {"delay_seconds": 7}}).to_spec()


def test_the_retry_spec_is_frozen_and_hides_its_options() -> None:
    spec = _queue({"plugin": "plugins.x:Y", "options": {"token": "s3cret"}}).to_spec().retry
    assert isinstance(spec.options, MappingProxyType)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.plugin = "other:Z"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.options["token"] = "x"  # type: ignore[index]
    assert "s3cret" not in repr(spec)
    assert "s3cret" not in repr(QueueSpec(id="q", retry=spec))


def test_defaults_are_the_default_strategy() -> None:
    assert QueueSpec(id="q").retry == RetrySpec() == _queue({}).to_spec().retry
    ctx = _ctx()
    decision = build_retry(RetrySpec())(ctx)
    assert isinstance(decision, Retry)
    assert NOW <= decision.at <= NOW + timedelta(seconds=4)  # exponential: 1 * 2**2, jittered


def test_a_spec_and_its_config_build_the_same_strategy() -> None:
    config = _queue({"strategy": "fixed", "delay_seconds": 5})
    spec = config.to_spec()
    from_spec = build_retry(spec.retry)(_ctx())
    from_config = build_retry(config.retry.to_spec())(_ctx())
    assert from_spec == from_config == Retry(at=NOW + timedelta(seconds=5))


@pytest.mark.parametrize(("package", "names"), [
    ("hipq.store", ["Store", "open_store", "normalize_url", "Change", "ChangeKind",
                    "QueueRecord", "Response"]),
    ("hipq.engine", ["Reconciler", "ReconcileResult"]),
    ("hipq.targets", ["ACCEPTED", "Accepted", "Completed", "Target", "Targets",
                      "build_target"]),
    ("hipq.throttling", ["DEFAULT_GROUP", "CapacityPool", "QuotaPlan", "is_open"]),
    ("hipq.downstream", ["Fail", "Launch", "KafkaResponder", "callback_app"]),
])
def test_lazy_packages_give_every_public_name(package: str, names: list[str]) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
        assert name in dir(module)
    assert set(names) <= set(module.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        module.nope  # noqa: B018


def test_lazy_packages_give_the_same_objects_as_their_modules() -> None:
    from hipq.engine import Reconciler
    from hipq.engine.reconciler import Reconciler as Direct
    from hipq.store import Change, Store, open_store
    from hipq.store.base import Store as DirectStore
    from hipq.store.factory import open_store as direct_open
    from hipq.store.records import Change as DirectChange

    assert (Reconciler, Store, open_store, Change) == (Direct, DirectStore, direct_open,
                                                       DirectChange)

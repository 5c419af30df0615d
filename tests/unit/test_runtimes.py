"""A queue's runtime (hipq/engine/runtimes.py) is built of the store's record: its
spec is the record's (made by the store once per settings change), the target and
a throttler plugin come from the stored settings, and it is built again only when
those settings change."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from hipq.config import QueueConfig
from hipq.engine.runtimes import Runtimes
from hipq.errors import ConfigError
from hipq.store.records import QueueRecord
from hipq.store.rows import queue_record
from hipq.targets import Targets
from hipq.testing import MemoryTarget

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _record(config: dict[str, Any], *, paused: bool = False) -> QueueRecord:
    return queue_record({"config": config, "paused": paused,
                         "created_at": NOW, "updated_at": NOW})


def _stored(**settings: Any) -> dict[str, Any]:
    return QueueConfig(id="q", target={"kind": "memory", "name": "t"}, **settings).stored()


def test_the_runtime_takes_the_records_spec_and_is_kept_while_the_settings_stay() -> None:
    target = MemoryTarget()
    runtimes = Runtimes(Targets(memory={"t": target}))
    record = _record(_stored(concurrency=4))
    runtime = runtimes.get(record)
    assert runtime.spec is record.spec
    assert runtime.target is target
    assert runtimes.get(record) is runtime
    assert runtimes.get(_record(_stored(concurrency=4))) is runtime  # the same settings
    changed = _record(_stored(concurrency=5))
    assert runtimes.get(changed).spec is changed.spec
    assert runtimes.cached("q") is not runtime


def test_stored_settings_the_edge_refuses_are_a_config_error() -> None:
    runtimes = Runtimes(Targets())
    record = _record({"id": "q", "attempts": 0})  # below the model's minimum
    assert record.spec.attempts == 0  # the spec is made as stored
    with pytest.raises(ConfigError, match=r"queue 'q'.*attempts"):
        runtimes.get(record)

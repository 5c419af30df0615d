"""What a queue's settings build (its spec, throttler, retry strategy, target),
kept until the settings change: plugins are loaded and instantiated once, not
every tick."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hipq.config import QueueConfig, TargetConfig
from hipq.engine.throttle import build_throttler
from hipq.plugins import Throttler
from hipq.retry import RetryFn, build_retry
from hipq.spec import QueueSpec
from hipq.store.records import QueueRecord
from hipq.targets.interface import Target

TargetFactory = Callable[[TargetConfig], Target]


@dataclass(frozen=True, slots=True)
class QueueRuntime:
    config: QueueConfig
    spec: QueueSpec
    throttler: Throttler
    retry: RetryFn
    target: Target | None


class Runtimes:
    def __init__(self, targets: TargetFactory) -> None:
        self.targets = targets
        self._built: dict[str, QueueRuntime] = {}

    def get(self, record: QueueRecord) -> QueueRuntime:
        """The queue's runtime, built again when its settings changed.

        Raises:
            ConfigError: a plugin or the target cannot be loaded.
        """
        current = self._built.get(record.id)
        if current is not None and current.config == record.config:
            return current
        config = record.config
        spec = config.to_spec()
        runtime = QueueRuntime(
            config=config, spec=spec, throttler=build_throttler(config),
            retry=build_retry(spec.retry),
            target=None if config.target is None else self.targets(config.target))
        self._built[record.id] = runtime
        return runtime

    def cached(self, queue: str) -> QueueRuntime | None:
        """The runtime built last for ``queue`` (None if never built)."""
        return self._built.get(queue)

"""What a queue's settings build (its spec, throttler, retry strategy, target),
kept until the settings change: plugins are loaded and instantiated once, not
every tick."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from hipq.config import QueueConfig, TargetConfig, format_validation_error
from hipq.engine.throttle import build_throttler
from hipq.errors import ConfigError
from hipq.plugins import Throttler
from hipq.retry import RetryFn, build_retry
from hipq.spec import PartnerSpec, QueueSpec
from hipq.store.records import QueueRecord
from hipq.targets.interface import Target

TargetFactory = Callable[[TargetConfig], Target]


def governed(spec: QueueSpec, partners: Mapping[str, PartnerSpec]) -> QueueSpec:
    """A queue's spec with its declared partner's back-off rules, where the partner
    sets them (they govern all its queues: docs/throttling.md, "Partners")."""
    partner = None if spec.partner is None else partners.get(spec.partner)
    if partner is None or partner.backoff is None:
        return spec
    return replace(spec, backoff=partner.backoff)


@dataclass(frozen=True, slots=True)
class QueueRuntime:
    settings: Mapping[str, Any]  # the stored settings it was built of
    config: QueueConfig
    spec: QueueSpec
    throttler: Throttler
    retry: RetryFn
    target: Target | None


class Runtimes:
    def __init__(self, targets: TargetFactory,
                 partners: Mapping[str, PartnerSpec] | None = None) -> None:
        self.targets = targets
        self.partners = dict(partners or {})
        self._built: dict[str, QueueRuntime] = {}

    def get(self, record: QueueRecord) -> QueueRuntime:
        """The queue's runtime, built again when its settings changed (its spec is
        the record's, made by the store).

        Raises:
            ConfigError: the stored settings are not valid, or a plugin or the
                target cannot be loaded.
        """
        current = self._built.get(record.id)
        if current is not None and (current.settings is record.settings
                                    or current.settings == record.settings):
            return current
        try:  # the target and a throttler plugin are the edge's types
            config = QueueConfig.model_validate(record.settings)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, f"queue {record.id!r}")) from None
        spec = governed(record.spec, self.partners)
        runtime = QueueRuntime(
            settings=record.settings, config=config, spec=spec,
            throttler=build_throttler(config), retry=build_retry(spec.retry),
            target=None if config.target is None else self.targets(config.target))
        self._built[record.id] = runtime
        return runtime

    def cached(self, queue: str) -> QueueRuntime | None:
        """The runtime built last for ``queue`` (None if never built)."""
        return self._built.get(queue)

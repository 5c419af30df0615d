"""Build a queue's target from its config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hipq.config import HttpTarget as HttpTargetConfig
from hipq.config import KafkaTarget as KafkaTargetConfig
from hipq.config import MemoryTarget as MemoryTargetConfig
from hipq.config import PythonTarget as PythonTargetConfig
from hipq.config import TargetConfig
from hipq.errors import ConfigError
from hipq.targets.http import HttpClient, HttpTarget
from hipq.targets.interface import Target
from hipq.targets.python import PythonTarget

if TYPE_CHECKING:  # aiokafka (5 MB) is imported only where a Kafka target is built
    from hipq.targets.kafka_target import KafkaProducer


def build_target(config: TargetConfig, *, memory: Mapping[str, Target] | None = None,
                 http: HttpClient | None = None,
                 kafka: KafkaProducer | None = None) -> Target:
    """A target for ``config``. ``memory`` maps names to in-process targets
    (``{kind: memory, name: ...}``), given by tests and embedders; ``http`` is the
    daemon's shared HTTP client (without it an HTTP target can be checked, not run);
    ``kafka`` the daemon's shared Kafka producer (likewise)."""
    if isinstance(config, PythonTargetConfig):
        return PythonTarget(config)
    if isinstance(config, HttpTargetConfig):
        return HttpTarget(config, http)
    if isinstance(config, KafkaTargetConfig):
        from hipq.targets.kafka_target import KafkaTarget

        return KafkaTarget(config, kafka, http)
    if isinstance(config, MemoryTargetConfig):
        if memory is None or config.name not in memory:
            raise ConfigError(f"no in-process target named {config.name!r} is registered")
        return memory[config.name]
    raise ConfigError(f"target kind {config.kind!r} is not available in this version of hipq")


@dataclass(frozen=True, slots=True)
class Targets:
    """The target factory the engine gets: ``targets(config)`` builds a queue's
    target with the daemon's shared clients (see :func:`build_target`)."""

    memory: Mapping[str, Target] | None = None
    http: HttpClient | None = None
    kafka: KafkaProducer | None = None

    def __call__(self, config: TargetConfig) -> Target:
        return build_target(config, memory=self.memory, http=self.http, kafka=self.kafka)

"""Targets: where launched jobs are sent, behind one small interface.

The names below are imported on first use (PEP 562): the interface
(``hipq.targets.interface``) loads without the HTTP, Kafka and configuration libraries
the targets themselves use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hipq.targets.interface import ACCEPTED, Accepted, Completed, LaunchOutcome, Target
    from hipq.targets.registry import Targets, build_target

_WHERE = {
    "ACCEPTED": "hipq.targets.interface",
    "Accepted": "hipq.targets.interface",
    "Completed": "hipq.targets.interface",
    "LaunchOutcome": "hipq.targets.interface",
    "Target": "hipq.targets.interface",
    "Targets": "hipq.targets.registry",
    "build_target": "hipq.targets.registry",
}

__all__ = [
    "ACCEPTED", "Accepted", "Completed", "LaunchOutcome", "Target", "Targets", "build_target",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

"""Targets: where launched jobs are sent, behind one small interface."""

from hipq.targets.base import ACCEPTED, Accepted, Completed, LaunchOutcome, Target
from hipq.targets.registry import Targets, build_target

__all__ = [
    "ACCEPTED", "Accepted", "Completed", "LaunchOutcome", "Target", "Targets", "build_target",
]

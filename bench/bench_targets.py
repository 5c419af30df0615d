"""Python target functions for the benchmarks (imported by the ``hipq run`` subprocess
through ``PYTHONPATH=bench``): ``bench_targets:done`` completes at once,
``bench_targets:accepted`` accepts and never reports (the outcome "comes later")."""

from __future__ import annotations

from typing import Any

from hipq.targets import ACCEPTED, Accepted


async def done(job: Any) -> None:
    """Succeeds at once (async: no worker thread)."""
    return


async def accepted(job: Any) -> Accepted:
    """The target took the job; no response ever comes (the job stays running)."""
    return ACCEPTED

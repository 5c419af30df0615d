"""Example Python targets (``target: {kind: python, function: ...}``)."""

from __future__ import annotations

import logging
from typing import Any

from hipq.jobs import Job

log = logging.getLogger(__name__)


async def greet(job: Job) -> dict[str, Any]:
    """Succeeds at once with a small result; the example config uses it."""
    name = job.data.get("name", "world")
    log.info("hello, %s (job %s, attempt %d)", name, job.id, job.attempt)
    return {"greeting": f"hello, {name}"}


async def flaky(job: Job, *, fail_until_attempt: int = 2) -> dict[str, Any]:
    """Fails the first tries, then succeeds: shows retries."""
    if job.attempt < fail_until_attempt:
        raise RuntimeError(f"try {job.attempt} fails on purpose")
    return {"succeeded_on_attempt": job.attempt}

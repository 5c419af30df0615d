"""The Python target of the crash test (``tests.e2e.crash_target:work``).

It runs inside the ``hipq run`` subprocess. Every launch is recorded durably
*before* the work starts: one ``"queue id attempt\\n"`` line appended to
``log_path`` with ``O_APPEND`` in a single ``write`` (a SIGKILL keeps what the
kernel already has), so the test can count how many times each job was launched.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

from hipq.errors import LaunchError


async def work(job: Any, *, log_path: str, max_sleep: float = 0.05,
               refuse_every: int = 0) -> dict[str, Any]:
    line = f"{job.queue} {job.id} {job.attempt}\n".encode()
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    await asyncio.sleep(random.uniform(0, max_sleep))
    n = int(job.data["n"])
    if refuse_every and n % refuse_every == 0:
        raise LaunchError(f"job {job.id} refused on purpose", kind="response_failed")
    return {"n": n, "attempt": job.attempt}


async def accept(job: Any, **_: Any) -> Any:
    """Sent, and answered later by a response (``tests/e2e/test_response_commit.py``)."""
    from hipq.targets import ACCEPTED

    return ACCEPTED

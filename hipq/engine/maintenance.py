"""Vacuuming the hot ``jobs`` table (PostgreSQL) as jobs move through it.

Every job is inserted, updated and deleted in ``jobs``; between autovacuum runs its
indexes fill with entries of jobs long gone. Each tick tells how many jobs it
claimed and ended (:class:`~hipq.engine.requests.Moved`) and, every ``vacuum_every``
of them, the executor runs one vacuum in the background. A store that cannot
(SQLite, or a role not allowed to) answers False once and is not asked again; a
failed vacuum is retried at the next threshold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from hipq.errors import HipqError

log = logging.getLogger(__name__)


class Vacuum:
    """``run``: the store's vacuum (``Store.jobs_vacuum``), started in the background."""

    def __init__(self, run: Callable[[], Awaitable[bool]], *, every: int) -> None:
        self._run = run
        self.every = every
        self._enabled = every > 0
        self._moved = 0
        self._task: asyncio.Task[None] | None = None

    def count(self, moved: int) -> None:
        """``moved`` jobs were claimed or ended; vacuum if enough did."""
        self._moved += moved
        if not self._enabled or self._moved < self.every:
            return
        if self._task is not None and not self._task.done():
            return
        self._moved = 0
        self._task = asyncio.ensure_future(self._vacuum())

    async def _vacuum(self) -> None:
        try:
            done = await self._run()
        except HipqError as exc:
            log.warning("vacuum of the jobs table failed: %s", exc,
                        extra={"action": "vacuum_error"})
            return
        if not done:
            self._enabled = False

    async def wait(self) -> None:
        """Until a vacuum under way has ended."""
        if self._task is not None:
            await self._task

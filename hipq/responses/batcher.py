"""Group commit: concurrent calls share one round trip to the database.

:class:`Batcher` turns a function over a list (one statement, one commit) into a
function over one item. Callers that arrive while a batch is being written wait
for the next one, so the batch grows with the load and a lone caller pays one
event-loop turn: under load, a hundred callbacks arriving within the same few
milliseconds become one INSERT and one commit, and each caller still gets its
answer only after its own row is durable (an error fails every caller of that
batch, and nothing of it is acknowledged).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_BATCH = 1000  # items per call of the batch function


class Batcher(Generic[T, R]):
    def __init__(self, run: Callable[[list[T]], Awaitable[Sequence[R]]], *,
                 max_batch: int = MAX_BATCH) -> None:
        self._run = run
        self._max = max_batch
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._flushing: asyncio.Task[None] | None = None

    async def submit(self, item: T) -> R:
        """``item``'s answer, once the batch it went out in has been written."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.ensure_future(self._flush())
        return await future

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # noqa: TID251 (one loop turn: let concurrent callers join)
        while self._pending:
            batch, self._pending = self._pending[:self._max], self._pending[self._max:]
            try:
                answers = await self._run([item for item, _ in batch])
            except BaseException as exc:  # every caller of this batch learns it failed
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            for (_, future), answer in zip(batch, answers, strict=True):
                if not future.done():
                    future.set_result(answer)

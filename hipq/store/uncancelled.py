"""Store calls a cancellation cannot cut in half (SQLite).

aiosqlite runs each statement in a thread of its connection. When the task waiting
on a statement is cancelled, the statement still runs, and SQLAlchemy loses track of
the connection: a ``BEGIN IMMEDIATE`` that went through in the thread leaves a
connection that holds SQLite's one write lock, out of the pool, until the garbage
collector closes it. The pool opens another connection, whose every transaction then
waits ``busy_timeout`` and fails with "database is locked", for as long as the lost
one lives (minutes, in ``tests/contract/test_cancelled_calls.py``). A shutdown
cancels its watchers; a client can give up on a request; so this is not rare.

:func:`uncancelled` makes each public call of a store class run as a task of its own,
awaited through :func:`asyncio.shield`: a cancelled caller gets its
``CancelledError`` at once, the call runs to its end (commit or rollback) behind it,
and :meth:`close` waits for such calls before the pool closes.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

C = TypeVar("C", bound=type)

_RUNNING = "_uncancelled_calls"


def uncancelled(cls: C) -> C:
    """Wrap every public coroutine method of ``cls`` (its bases' too) but ``close``,
    which waits for the calls still running, then closes."""
    for name in dir(cls):
        method = getattr(cls, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(method):
            continue
        setattr(cls, name, _closing(method) if name == "close" else _shielded(method))
    return cls


def _calls(store: Any) -> set[asyncio.Task[Any]]:
    running: set[asyncio.Task[Any]] | None = store.__dict__.get(_RUNNING)
    if running is None:
        running = store.__dict__[_RUNNING] = set()
    return running


def _shielded(method: Callable[..., Coroutine[Any, Any, Any]]
              ) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if asyncio.current_task() in _calls(self):  # one call of the store inside another
            return await method(self, *args, **kwargs)
        task = asyncio.ensure_future(method(self, *args, **kwargs))
        running = _calls(self)
        running.add(task)
        task.add_done_callback(_finished(running))
        return await asyncio.shield(task)

    return call


def _finished(running: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        running.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.debug("a store call ended after its caller left: %r", exc)  # retrieved

    return done


def _closing(method: Callable[..., Coroutine[Any, Any, Any]]
             ) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(method)
    async def close(self: Any, *args: Any, **kwargs: Any) -> Any:
        if running := _calls(self):
            await asyncio.wait(list(running))
        return await method(self, *args, **kwargs)

    return close

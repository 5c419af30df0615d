"""The Python target: ``{kind: python, function: "module:attr", options: {...}}``.

The function gets the job (a snapshot) and, if it accepts them, the ``options``
as keyword arguments. For a job with a trace, the try's context is
:func:`hipq.tracing.current_traceparent` while it runs (with OpenTelemetry, the
``hipq try`` span is the current span: docs/traces.md). It may be ``async`` or
plain (then it runs in a worker thread). Its return value is the job's result; returning
``hipq.targets.ACCEPTED`` says the outcome will be reported later. Raising
:class:`hipq.Throttled` is the partner's "not now": the try ends ``throttled``
(given back, its scope paused, as a 429; its ``retry_after`` and ``usage`` in the
try's error data). Raising :class:`~hipq.errors.LaunchError` (not retryable) fails
the job at once; any other exception is a retryable ``response_failed`` try, its
traceback kept on the try (``error.data.traceback``, the last ``TRACEBACK_CHARS``
characters).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hipq.config import PythonTarget as PythonTargetConfig
from hipq.errors import ConfigError, LaunchError
from hipq.jobs import ErrorKind, Job
from hipq.plugins import load_object
from hipq.targets.interface import Accepted, Completed, LaunchOutcome
from hipq.throttled import Throttled

TRACEBACK_CHARS = 4000  # what a try keeps of a traceback (frames and error line)
_ERROR_LINE_CHARS = 1000


def bounded_traceback(exc: BaseException) -> str:
    """The traceback, bounded: the innermost frames (where the error is) and the
    start of the error line; what was cut is marked with ``...``."""
    error = "".join(traceback.format_exception_only(exc))
    if len(error) > _ERROR_LINE_CHARS:
        error = error[:_ERROR_LINE_CHARS] + "...\n"
    frames = "Traceback (most recent call last):\n" + "".join(traceback.format_tb(
        exc.__traceback__))
    room = TRACEBACK_CHARS - len(error)
    if len(frames) > room:
        frames = "..." + frames[-room:]
    return frames + error


class PythonTarget:
    def __init__(self, config: PythonTargetConfig) -> None:
        fn = load_object(config.function)
        if not callable(fn):
            raise ConfigError(f"target function {config.function!r} is not callable")
        self._fn: Callable[..., Any] = fn
        self._options = dict(config.options)
        self._is_async = inspect.iscoroutinefunction(fn)
        self.in_tick = config.in_tick  # its tries may run within their tick (.inline)
        # a plain function's threads, the target's own: functions of another target that
        # never return cannot take them (asyncio.to_thread shares one pool per loop)
        self._threads: ThreadPoolExecutor | None = None

    async def launch(self, job: Job) -> LaunchOutcome:
        return await self.launch_owned(job.snapshot())

    async def launch_owned(self, snapshot: Job) -> LaunchOutcome:
        """:meth:`launch`, for a job that is the caller's own copy, which the function
        may scribble on (an in-tick run's try: hipq.engine.inline.try_of)."""
        try:
            if self._is_async:
                value = await self._fn(snapshot, **self._options)
            else:
                value = await self._in_thread(snapshot)
        except Throttled as exc:  # the target calls the partner: its word is the partner's
            return Completed(status="throttled", kind=ErrorKind.THROTTLED, error=exc.error())
        except LaunchError as exc:
            return Completed(status="failed", error={"kind": exc.kind, "detail": str(exc)},
                             retryable=exc.retryable, kind=exc.kind)
        except Exception as exc:
            return Completed(status="failed",
                             error={"kind": "response_failed", "detail": repr(exc)[:1000],
                                    "traceback": bounded_traceback(exc)},
                             retryable=True)
        if isinstance(value, Accepted | Completed):
            return value
        return Completed(status="succeeded", result=value)

    async def _in_thread(self, snapshot: Job) -> Any:
        """The plain function in one of the target's threads, with the caller's
        context (the try's trace), as ``asyncio.to_thread`` runs it."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(thread_name_prefix="hipq-target")
        call = functools.partial(contextvars.copy_context().run, self._fn, snapshot,
                                 **self._options)
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    async def close(self) -> None:
        if self._threads is not None:  # a function still running keeps its thread
            self._threads.shutdown(wait=False, cancel_futures=True)

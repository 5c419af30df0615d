"""The Python target: ``{kind: python, function: "module:attr", options: {...}}``.

The function gets the job (a snapshot) and, if it accepts them, the ``options``
as keyword arguments. It may be ``async`` or plain (then it runs in a worker
thread). Its return value is the job's result; returning
``hipq.targets.ACCEPTED`` says the outcome will be reported later. Raising
:class:`~hipq.errors.LaunchError` (not retryable) fails the job at once; any other
exception is a retryable ``response_failed`` try.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from hipq.config import PythonTarget as PythonTargetConfig
from hipq.errors import ConfigError, LaunchError
from hipq.jobs import Job
from hipq.plugins import load_object
from hipq.targets.base import Accepted, Completed, LaunchOutcome


class PythonTarget:
    def __init__(self, config: PythonTargetConfig) -> None:
        fn = load_object(config.function)
        if not callable(fn):
            raise ConfigError(f"target function {config.function!r} is not callable")
        self._fn: Callable[..., Any] = fn
        self._options = dict(config.options)
        self._is_async = inspect.iscoroutinefunction(fn)

    async def launch(self, job: Job) -> LaunchOutcome:
        snapshot = job.snapshot()
        try:
            if self._is_async:
                value = await self._fn(snapshot, **self._options)
            else:
                value = await asyncio.to_thread(self._fn, snapshot, **self._options)
        except LaunchError as exc:
            return Completed(status="failed", error={"kind": exc.kind, "detail": str(exc)},
                             retryable=exc.retryable, kind=exc.kind)
        except Exception as exc:
            return Completed(status="failed",
                             error={"kind": "response_failed", "detail": repr(exc)[:1000]},
                             retryable=True)
        if isinstance(value, Accepted | Completed):
            return value
        return Completed(status="succeeded", result=value)

    async def close(self) -> None:
        return None

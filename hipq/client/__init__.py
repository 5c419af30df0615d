"""A client of hipq's HTTP API (README.md, "From another service"), sync and async, over httpx.

    from hipq.client import Client

    with Client("http://127.0.0.1:8080", token="...") as hipq:
        hipq.enqueue("invoices", "inv-1", {"order": 42})
        hipq.enqueue_many("invoices", ({"id": f"inv-{n}", "data": {"n": n}} for n in range(50_000)))
        for job in hipq.archived("invoices", status="failed"):
            print(job.id, job.error)

Answers are the API's own models (``hipq.api.models``). A non-2xx answer raises
:class:`ApiStatusError` (``.status``, ``.code``, ``.message``), a
:class:`HipqError` (:class:`hipq.errors.HipqError` itself, the root of hipq's
errors, exported here too); a 503 or a connection error is retried with back-off first (see
``hipq/client/_core.py``). Importing this module loads httpx and pydantic, not the
daemon (no SQLAlchemy, aiohttp or aiokafka).
"""

from hipq.api.models import BatchResult, JobOut, QueueOut, StatsOut
from hipq.api.schedule_models import ScheduleOut
from hipq.client._async import AsyncClient
from hipq.client._core import ApiStatusError, EnqueueResult, RetryPolicy
from hipq.client._sync import Client
from hipq.errors import HipqError

__all__ = ["ApiStatusError", "AsyncClient", "BatchResult", "Client", "EnqueueResult",
           "HipqError", "JobOut", "QueueOut", "RetryPolicy", "ScheduleOut", "StatsOut"]

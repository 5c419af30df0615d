"""The API's calls as data (one function per client method), so that the sync and
the async client differ only in how they send them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hipq.client._core import Call


def create_queue(queue_id: str, settings: Mapping[str, Any]) -> Call:
    return Call(method="POST", path="/v1/jobs", body={"id": queue_id, **settings})


def get_job(queue: str, job_id: str) -> Call:
    return Call(method="GET", path=f"/v1/jobs/{queue}/{job_id}")


def cancel(queue: str, job_id: str) -> Call:
    return Call(method="DELETE", path=f"/v1/jobs/{queue}/{job_id}")


def replay(queue: str, job_id: str) -> Call:
    # not idempotent: a retried replay whose first try arrived would make two jobs
    return Call(method="POST", path=f"/v1/jobs/{queue}/{job_id}/replay", idempotent=False)


def pause(queue: str) -> Call:
    return Call(method="POST", path=f"/v1/jobs/{queue}/pause")


def resume(queue: str) -> Call:
    return Call(method="POST", path=f"/v1/jobs/{queue}/resume")


def get_queue(queue: str) -> Call:
    return Call(method="GET", path=f"/v1/jobs/{queue}")


def stats() -> Call:
    return Call(method="GET", path="/v1/stats")


def schedules() -> Call:
    return Call(method="GET", path="/v1/schedules")


def live_page(queue: str, state: str, limit: int, cursor: str | None) -> Call:
    params: dict[str, str | int] = {"name": queue, "state": state, "limit": limit}
    if cursor is not None:
        params["cursor"] = cursor
    return Call(method="GET", path="/v1/queued-jobs", params=params)


def archived_page(queue: str | None, status: str | None, limit: int,
                  cursor: str | None) -> Call:
    given = {"name": queue, "status": status, "cursor": cursor}
    params: dict[str, str | int] = {"limit": limit}
    params |= {k: v for k, v in given.items() if v is not None}
    return Call(method="GET", path="/v1/archived-jobs", params=params)


"""``GET /v1/queued-jobs``: a queue's queued or running jobs, keyset-paginated (the
order lives in :mod:`hipq.live_jobs`, the cursor :data:`LIVE_CURSOR` here). A page
holds at most ``limit`` jobs and about :data:`~hipq.api.paging.PAGE_BYTES` of JSON (at
least one job), read from the store in chunks (:func:`~hipq.api.paging.collect_page`)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated, Any, Literal

from aiohttp import web
from pydantic import Field

from hipq.api.cursors import CURSOR_NAME, CURSOR_TIME, cursor_param, time_of, time_text
from hipq.api.deps import DEPS
from hipq.api.io import cursor_parts, read_query
from hipq.api.models import MAX_PAGE, AttemptOut, JobOut, _In, _Out
from hipq.api.paging import collect_page
from hipq.config import QUEUE_ID_PATTERN
from hipq.jobs import Job, JobState, Ordering
from hipq.live_jobs import LiveListing
from hipq.values import INT32_MAX

# a time, a priority (32 bits) and a job id (readable: see hipq.api.cursors)
LIVE_CURSOR = rf"^{CURSOR_TIME}~-?[0-9]{{1,10}}~{CURSOR_NAME}$"


class LiveQuery(_In):
    name: Annotated[str, Field(min_length=1, max_length=100, pattern=QUEUE_ID_PATTERN)] = Field(
        description="the queue")
    state: Literal["queued", "running"] = "queued"
    limit: int = Field(default=100, ge=1, le=MAX_PAGE)
    cursor: str | None = cursor_param(LIVE_CURSOR, "time~priority~id: a queued job's run_at "
                                      "and priority, a running job's launched_at and 0")


class LiveJobOut(JobOut):
    """A live job: the job JSON without ``history``."""

    history: list[AttemptOut] = Field(default_factory=list, exclude=True)
    history_count: int | None = Field(default=None, exclude=True)


class LivePageOut(_Out):
    jobs: list[LiveJobOut]
    next_cursor: str | None


async def queued_jobs(request: web.Request) -> web.Response:
    query = read_query(request, LiveQuery)
    store = request.app[DEPS].service.store
    listing = await LiveListing.open(store, queue=query.name, state=query.state, cursor=None)
    if query.cursor is not None:
        listing = replace(listing, after=_live_key(query.cursor, listing))
    page, last, more = await collect_page(listing.read, _job_json, listing.key_of,
                                          limit=query.limit, after=listing.after)
    cursor = _live_cursor(last[0], listing.state) if more and last else None
    body = '{"jobs":[' + ",".join(page) + '],"next_cursor":' + json.dumps(cursor) + "}"
    return web.Response(body=body.encode(), content_type="application/json")


def _live_key(cursor: str, listing: LiveListing) -> list[Any]:
    """The sort key of ``cursor`` in the listing's order; every cursor of the shape
    :data:`LIVE_CURSOR` is a position in any order and state (400 otherwise)."""
    when, priority, job_id = cursor_parts(cursor, LIVE_CURSOR)
    at, rank = time_of(when), max(-INT32_MAX - 1, min(INT32_MAX, int(priority)))
    if listing.state == JobState.RUNNING.value:
        return [at, job_id]
    if listing.ordering is Ordering.TIME_THEN_PRIORITY:
        return [at, rank, job_id]
    return [rank, at, job_id]


def _live_cursor(job: Job, state: str) -> str:
    if state == JobState.RUNNING.value:
        return f"{time_text(job.launched_at or job.run_at)}~0~{job.id}"
    return f"{time_text(job.run_at)}~{job.priority}~{job.id}"


def _job_json(job: Job) -> str:
    return LiveJobOut.model_validate(job.to_json()).model_dump_json()

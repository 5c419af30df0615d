"""``GET /v1/queued-jobs``: a queue's queued or running jobs, keyset-paginated (the
order and the cursor live in :mod:`hipq.live_jobs`). A page holds at most ``limit`` jobs
and about :data:`~hipq.api.paging.PAGE_BYTES` of JSON (at least one job), read
from the store in chunks (:func:`~hipq.api.paging.collect_page`)."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from aiohttp import web
from pydantic import Field

from hipq.api.api_errors import ApiError
from hipq.api.deps import DEPS
from hipq.api.io import read_query
from hipq.api.models import MAX_PAGE, AttemptOut, JobOut, _In, _Out
from hipq.api.paging import collect_page
from hipq.config import QUEUE_ID_PATTERN
from hipq.jobs import Job
from hipq.live_jobs import InvalidCursor, LiveListing


class LiveQuery(_In):
    name: Annotated[str, Field(min_length=1, max_length=100, pattern=QUEUE_ID_PATTERN)] = Field(
        description="the queue")
    state: Literal["queued", "running"] = "queued"
    limit: int = Field(default=100, ge=1, le=MAX_PAGE)
    cursor: Annotated[str, Field(max_length=2000)] | None = Field(
        default=None, description="next_cursor of the previous page")


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
    try:
        listing = await LiveListing.open(store, queue=query.name, state=query.state,
                                         cursor=query.cursor)
    except InvalidCursor as exc:
        raise ApiError(400, "invalid_cursor", str(exc)) from None
    page, last, more = await collect_page(listing.read, _job_json, listing.key_of,
                                          limit=query.limit, after=listing.after)
    cursor = listing.cursor_after(last[0]) if more and last else None
    body = '{"jobs":[' + ",".join(page) + '],"next_cursor":' + json.dumps(cursor) + "}"
    return web.Response(body=body.encode(), content_type="application/json")


def _job_json(job: Job) -> str:
    return LiveJobOut.model_validate(job.to_json()).model_dump_json()

"""``GET /v1/queued-jobs``: a queue's queued or running jobs, keyset-paginated
(the listing itself lives in :mod:`hipq.live`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from aiohttp import web
from pydantic import Field

from hipq.api.deps import DEPS
from hipq.api.errors import ApiError
from hipq.api.io import read_query, reply
from hipq.api.models import MAX_PAGE, AttemptOut, JobOut, _In, _Out
from hipq.config import QUEUE_ID_PATTERN
from hipq.live import InvalidCursor, list_live


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


class LivePageOut(_Out):
    jobs: list[LiveJobOut]
    next_cursor: str | None


async def queued_jobs(request: web.Request) -> web.Response:
    query = read_query(request, LiveQuery)
    store = request.app[DEPS].service.store
    try:
        page = await list_live(store, queue=query.name, state=query.state, limit=query.limit,
                               cursor=query.cursor)
    except InvalidCursor as exc:
        raise ApiError(400, "invalid_cursor", str(exc)) from None
    jobs: list[dict[str, Any]] = [j.to_json() for j in page.jobs]
    return reply(LivePageOut.model_validate({"jobs": jobs, "next_cursor": page.next_cursor}))

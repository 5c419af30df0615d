"""``GET /v1/job-search?id=``: a job by its id alone, the dashboard's search box
(docs/dashboard.md).

Job ids are unique per queue, and the tables are keyed by ``(queue, id)``: there is
no index on the id alone, and a scan of the archive is never made for a read. So
the search asks each queue in turn by its primary key (the hot table, the archive,
then merged jobs: at most three indexed lookups per queue), in queue id order, for
at most :data:`SEARCHED_QUEUES` queues; beyond that the answer says it is not
complete and the page asks for the queue as well (``name``: one queue, one lookup).
A job still in the intake (SPEC 16, enqueued from SQL and not ingested yet) is not
searched: its queue's owner ingests it within a tick.
"""

from __future__ import annotations

from typing import Annotated

from aiohttp import web
from pydantic import Field

from hipq.api.deps import DEPS
from hipq.api.handlers import job_out
from hipq.api.io import read_query, reply
from hipq.api.models import AttemptOut, JobOut, _In, _Out
from hipq.config import QUEUE_ID_PATTERN
from hipq.jobs import JOB_ID_PATTERN, Job

SEARCHED_QUEUES = 100  # queues asked, at most, for an id given alone


class SearchQuery(_In):
    id: Annotated[str, Field(min_length=1, max_length=200, pattern=JOB_ID_PATTERN)] = Field(
        description="the job id")
    name: Annotated[str, Field(min_length=1, max_length=100, pattern=QUEUE_ID_PATTERN)] | None = (
        Field(default=None, description="only this queue (default: every queue, up to "
              f"{SEARCHED_QUEUES})"))


class FoundJobOut(JobOut):
    """A job found: the job JSON without ``history``."""

    history: list[AttemptOut] = Field(default_factory=list, exclude=True)
    history_count: int | None = Field(default=None, exclude=True)


class SearchOut(_Out):
    jobs: list[FoundJobOut] = Field(description="the jobs with this id, one per queue that "
                                    "has one, in queue id order")
    searched: int = Field(description="how many queues were asked")
    complete: bool = Field(description=f"false: there are more than {SEARCHED_QUEUES} "
                           "queues and only the first were asked; give the queue (name)")


async def job_search(request: web.Request) -> web.Response:
    query = read_query(request, SearchQuery)
    service = request.app[DEPS].service
    if query.name is not None:
        names = [query.name]
    else:
        names = sorted(r.id for r in await service.list_queues())
    asked = names[:SEARCHED_QUEUES]
    found: list[Job] = []
    for name in asked:
        job = await service.store.job_get(name, query.id)
        if job is not None:
            found.append(job)
    return reply(SearchOut(
        jobs=[FoundJobOut.model_validate(job_out(j).model_dump()) for j in found],
        searched=len(asked), complete=len(asked) == len(names)))

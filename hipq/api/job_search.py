"""``GET /v1/job-search?id=``: a job by its id alone, the dashboard's search box
(docs/dashboard.md).

Job ids are unique per queue, and the tables are keyed by ``(queue, id)``: there is
no index on the id alone, and a scan of the archive is never made for a read. So
the search asks each queue in turn by its primary key (the hot table, the archive,
then merged jobs: at most three indexed lookups per queue), in queue id order, for
at most :data:`SEARCHED_QUEUES` queues; beyond that the answer says it is not
complete and the page asks for the queue as well (``name``: one queue, one lookup).
A job still in the intake (enqueued from SQL and not ingested yet,
docs/from-your-database.md) is not searched: its queue's owner ingests it within a
tick.

The answer is bounded in bytes (docs/http-api.md): a found job's ``data``,
``result`` and ``error`` come whole when their JSON text is at most
:data:`VALUE_CHARS` characters, else that text cut there (a string, named in
``truncated``), cut by the store's statement so that no large value is read whole
(:meth:`~hipq.store.base.Store.job_get_listed`); and the answer stops before it
would pass :data:`PAGE_BYTES`, saying it is not complete (the queues after the last
one asked were not searched). The job's own page shows it whole.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from aiohttp import web
from pydantic import Field

from hipq.api.deps import DEPS
from hipq.api.io import read_query
from hipq.api.models import AttemptOut, JobOut, _In, _Out
from hipq.api.paging import PAGE_BYTES as LIST_PAGE_BYTES
from hipq.config import QUEUE_ID_PATTERN
from hipq.jobs import JOB_ID_PATTERN
from hipq.store.records import ListedJob

SEARCHED_QUEUES = 100  # queues asked, at most, for an id given alone
VALUE_CHARS = 4096  # characters of a found job's data, result or error JSON text shown
PAGE_BYTES = LIST_PAGE_BYTES  # an answer stops growing before this many bytes

Cut = Literal["data", "result", "error"]


class SearchQuery(_In):
    id: Annotated[str, Field(min_length=1, max_length=200, pattern=JOB_ID_PATTERN)] = Field(
        description="the job id")
    name: Annotated[str, Field(min_length=1, max_length=100, pattern=QUEUE_ID_PATTERN)] | None = (
        Field(default=None, description="only this queue (default: every queue, up to "
              f"{SEARCHED_QUEUES})"))


class FoundJobOut(JobOut):
    """A job found: the job JSON without ``history``; a ``data``, ``result`` or
    ``error`` whose JSON text is longer than 4,096 characters is that text cut there
    (a string), named in ``truncated``."""

    data: Any = Field(description="the job's data, or its JSON text cut (see truncated)")
    error: Any = None
    truncated: list[Cut] = Field(default_factory=list, description="the values given as "
                                 "their JSON text cut to 4,096 characters")
    history: list[AttemptOut] = Field(default_factory=list, exclude=True)
    history_count: int | None = Field(default=None, exclude=True)


class SearchOut(_Out):
    jobs: list[FoundJobOut] = Field(description="the jobs with this id, one per queue that "
                                    "has one, in queue id order")
    searched: int = Field(description="how many queues were asked")
    complete: bool = Field(description=f"false: only the first queues were asked (there are "
                           f"more than {SEARCHED_QUEUES}, or the answer was full); give the "
                           "queue (name)")


async def job_search(request: web.Request) -> web.Response:
    query = read_query(request, SearchQuery)
    service = request.app[DEPS].service
    if query.name is not None:
        names = [query.name]
    else:
        names = sorted(r.id for r in await service.list_queues())
    texts: list[str] = []
    size, searched = len(_answer([], SEARCHED_QUEUES, complete=False)), 0
    for name in names[:SEARCHED_QUEUES]:
        found = await service.store.job_get_listed(name, query.id, value_chars=VALUE_CHARS)
        text = None if found is None else _found_json(found)
        if text is not None:
            size += len(text.encode()) + 1  # and a comma
            if size > PAGE_BYTES:
                break
            texts.append(text)
        searched += 1
    body = _answer(texts, searched, complete=searched == len(names))
    return web.Response(body=body, content_type="application/json")


def _found_json(found: ListedJob) -> str:
    body = found.job.to_json() | dict(found.cut) | {"truncated": list(found.cut)}
    return FoundJobOut.model_validate(body).model_dump_json()


def _answer(texts: list[str], searched: int, *, complete: bool) -> bytes:
    return (f'{{"jobs":[{",".join(texts)}],"searched":{searched},'
            f'"complete":{json.dumps(complete)}}}').encode()

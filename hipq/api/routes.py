"""The route table: method, path, handler, role, and the models of its body, query
and answers. ``create_app`` registers it; ``openapi`` documents it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web
from pydantic import BaseModel

from hipq.api import (
    dashboard,
    intake_page,
    metrics_page,
    partners_page,
    queued_jobs,
    responses_page,
)
from hipq.api import handlers as h
from hipq.api import job_search as search
from hipq.api import outcome_history as outcomes
from hipq.api import schedules_page as sched
from hipq.api.auth import Role
from hipq.api.models import (
    AcceptedOut,
    AnyObject,
    ArchivedPage,
    ArchivedQuery,
    BatchOut,
    BatchRequest,
    CallbackQuery,
    ErrorOut,
    HealthOut,
    HealthQuery,
    JobOut,
    QueueList,
    QueueOut,
    ResponsesPage,
    ResponsesQuery,
    StatsOut,
)
from hipq.api.schedule_models import ScheduleList
from hipq.bodies import EnqueueRequest, ResponseRequest
from hipq.config import QueueConfig

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Answers = Mapping[int, type[BaseModel] | str]  # a model (JSON) or a media type


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    method: str
    path: str
    handler: Handler
    role: Role | None  # None: open (no token needed)
    summary: str
    answers: Answers
    body: type[BaseModel] | None = None
    body_required: bool = True
    query: type[BaseModel] | None = None
    signed: bool = False  # checked by its URL signature instead of a token
    documented: bool = True
    tags: tuple[str, ...] = field(default=())


R, P, A = Role.READER, Role.PRODUCER, Role.ADMIN

ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/healthz", handler=h.healthz, role=None, tags=("operations",),
          summary="Liveness and database check; with ?nonce=, the daemon's proof that it "
          "holds the database's signing key", query=HealthQuery, answers={200: HealthOut}),
    Route(method="GET", path="/", handler=dashboard.dashboard, role=None, tags=("operations",),
          summary="The dashboard page (its data needs a token)", answers={200: "text/html"}),
    Route(method="GET", path="/dashboard/app.js", handler=dashboard.script, role=None,
          documented=False, summary="The dashboard's script", answers={200: "text/javascript"}),
    Route(method="GET", path="/dashboard/style.css", handler=dashboard.style, role=None,
          documented=False, summary="The dashboard's style", answers={200: "text/css"}),
    Route(method="GET", path="/metrics", handler=metrics_page.metrics, role=R, tags=("operations",),
          summary="Prometheus metrics", answers={200: "text/plain"}),
    Route(method="GET", path="/v1/whoami", handler=dashboard.whoami, role=R,
          tags=("operations",), summary="The role of the presented token (the dashboard "
          "shows the buttons it may use)", answers={200: dashboard.WhoAmI}),
    Route(method="GET", path="/v1/stats", handler=h.stats, role=R, tags=("operations",),
          summary="Queue depth, running weight, lag; response counts (unmatched...)",
          answers={200: StatsOut}),
    Route(method="POST", path="/v1/jobs", handler=h.create_queue, role=A, tags=("queues",),
          summary="Create (201) or update (200) a queue", body=QueueConfig,
          answers={200: QueueOut, 201: QueueOut}),
    Route(method="GET", path="/v1/jobs", handler=h.list_queues, role=R, tags=("queues",),
          summary="List queues with live stats", answers={200: QueueList}),
    Route(method="GET", path="/v1/jobs/{queue}", handler=h.get_queue, role=R, tags=("queues",),
          summary="One queue with live stats", answers={200: QueueOut}),
    Route(method="POST", path="/v1/jobs/{queue}/pause", handler=h.pause_queue, role=A,
          tags=("queues",), summary="Pause a queue (running jobs still finish)",
          answers={200: QueueOut}),
    Route(method="POST", path="/v1/jobs/{queue}/resume", handler=h.resume_queue, role=A,
          tags=("queues",), summary="Resume a paused queue", answers={200: QueueOut}),
    Route(method="POST", path="/v1/jobs/{queue}/batch", handler=h.enqueue_batch, role=P,
          tags=("jobs",), summary="Enqueue up to 10,000 jobs (idempotent per id)",
          body=BatchRequest, answers={200: BatchOut}),
    Route(method="PUT", path="/v1/jobs/{queue}/{id}", handler=h.enqueue, role=P,
          tags=("jobs",), summary="Enqueue a job; id 'random_id' makes a UUID. 201 created, "
          "200 idempotent repeat, 409 same id with another body", body=EnqueueRequest,
          body_required=False, answers={200: JobOut, 201: JobOut}),
    Route(method="GET", path="/v1/jobs/{queue}/{id}", handler=h.get_job, role=R, tags=("jobs",),
          summary="A job, live or archived, with its history", answers={200: JobOut}),
    Route(method="DELETE", path="/v1/jobs/{queue}/{id}", handler=h.cancel_job, role=P,
          tags=("jobs",), summary="Cancel a queued job (200) or a running one (202: applied "
          "at the owner's next tick)", answers={200: JobOut, 202: JobOut}),
    Route(method="POST", path="/v1/jobs/{queue}/{id}", handler=h.report_status, role=P,
          tags=("responses",), summary="Status callback for the running attempt "
          "(stale attempt: 409; a throttled status gives the try back and pauses nothing)",
          body=ResponseRequest, answers={202: AcceptedOut}),
    Route(method="POST", path="/v1/jobs/{queue}/{id}/replay", handler=h.replay_job, role=P,
          tags=("jobs",), summary="Replay a finished job as a new job",
          answers={201: JobOut}),
    Route(method="GET", path="/v1/archived-jobs", handler=h.archived_jobs, role=R,
          tags=("jobs",), summary="Finished jobs, newest first, keyset-paginated",
          query=ArchivedQuery, answers={200: ArchivedPage}),
    Route(method="GET", path="/v1/queued-jobs", handler=queued_jobs.queued_jobs, role=R,
          tags=("jobs",), summary="A queue's queued (queue order) or running (launch order) "
          "jobs, keyset-paginated", query=queued_jobs.LiveQuery,
          answers={200: queued_jobs.LivePageOut, 404: ErrorOut}),
    Route(method="GET", path="/v1/responses", handler=responses_page.unmatched_responses,
          role=R, tags=("responses",), summary="Responses recorded as unmatched (no job had "
          "their key within responses.buffer_seconds), newest first, keyset-paginated; "
          "result and error cut to 4,096 characters of JSON", query=ResponsesQuery,
          answers={200: ResponsesPage}),
    Route(method="GET", path="/v1/intake", handler=intake_page.rejected_rows, role=R,
          tags=("jobs",), summary="Rows enqueued from SQL (hipq_enqueue(), hipq.sql) that "
          "were rejected at ingest, with their error, newest first, keyset-paginated; "
          "values over 4,096 characters cut", query=intake_page.IntakeQuery,
          answers={200: intake_page.IntakePageOut}),
    Route(method="POST", path="/v1/responses/{key}", handler=h.signed_response, role=None,
          signed=True, tags=("responses",), summary="A downstream's response at its signed "
          "callback_url (no token; bad signature: 401; stale attempt: 409)",
          body=ResponseRequest, body_required=False, query=CallbackQuery,
          answers={202: AcceptedOut}),
    Route(method="POST", path="/v1/inbox/{queue}", handler=h.templated_response, role=P,
          tags=("responses",), summary="A response matched by the queue's correlation "
          "'response' template over body, path and query", body=AnyObject,
          answers={202: AcceptedOut}),
    Route(method="POST", path="/v1/inbox/{queue}/{tail}", handler=h.templated_response, role=P,
          tags=("responses",), summary="The same, with a path segment for the template "
          "({path.tail})", body=AnyObject, answers={202: AcceptedOut}),
    Route(method="GET", path="/v1/job-search", handler=search.job_search, role=R,
          tags=("jobs",), summary="Jobs with this id, live or archived: in one queue "
          "(name), or in every queue up to 100 (one indexed lookup each; no history)",
          query=search.SearchQuery, answers={200: search.SearchOut}),
    Route(method="GET", path="/v1/outcomes", handler=outcomes.outcomes, role=R,
          tags=("operations",), summary="This daemon's job outcomes of the last hour, per "
          "minute, of one queue or all (kept in memory: empty after a restart)",
          query=outcomes.OutcomesQuery, answers={200: outcomes.OutcomesOut}),
    Route(method="GET", path="/v1/partners", handler=partners_page.list_partners, role=R,
          tags=("partners",), summary="Every declared partner with its buckets, concurrency "
          "in use and learned rate, as the owner of its queues last wrote them",
          answers={200: partners_page.PartnerList}),
    Route(method="GET", path="/v1/partners/{partner}", handler=partners_page.get_partner, role=R,
          tags=("partners",), summary="One declared partner: its buckets, concurrency in "
          "use, learned rate, busiest keys and last hour per minute (accepted, refused)",
          answers={200: partners_page.PartnerOut, 404: ErrorOut}),
    Route(method="GET", path="/v1/schedules", handler=sched.list_schedules, role=R,
          tags=("schedules",), summary="The recurring schedules with their next fire time",
          answers={200: ScheduleList}),
)

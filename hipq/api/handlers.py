"""The route handlers: parse with the API models, call :class:`~hipq.service.Hipq`,
answer with the API models. No logic lives here."""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime
from typing import Any

from aiohttp import web
from pydantic import Field, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from hipq import tracing
from hipq.api.api_errors import ApiError
from hipq.api.auth import Role, request_role
from hipq.api.deps import DEPS
from hipq.api.io import decode_cursor, encode_cursor, read_body, read_json, read_query, reply
from hipq.api.models import (
    HISTORY_SHOWN,
    PAUSES_SHOWN,
    AcceptedOut,
    ArchivedQuery,
    BatchEnvelope,
    CallbackQuery,
    HealthOut,
    HealthQuery,
    IntakeCounts,
    JobOut,
    QueueList,
    QueueOut,
    QueueStatsOut,
    ResponseCounts,
    StatsOut,
)
from hipq.api.paging import collect_page
from hipq.api.policy import check_plugin_modules, keep_secrets, redacted
from hipq.api.stats_cache import STATS, Snapshot
from hipq.bodies import BatchItem, DataOnly, EnqueueRequest, ResponseRequest
from hipq.config import QUEUE_ID_PATTERN, QueueConfig
from hipq.errors import QueueNotFound
from hipq.jobs import JOB_ID_PATTERN, Job, JobState, is_job_id
from hipq.json_types import type_problem
from hipq.responses.signing import connection_name
from hipq.service import Hipq, queue_config
from hipq.store import InsertStatus, JobHistory, QueueRecord, QueueStats
from hipq.values import MAX_DEPTH, json_problem

log = logging.getLogger(__name__)

RANDOM_ID = "random_id"
_QUEUE_ID = re.compile(QUEUE_ID_PATTERN)
_DOTS = frozenset({".", ".."})  # path segments that would rewrite a target URL


def _service(request: web.Request) -> Hipq:
    return request.app[DEPS].service


def _queue_id(request: web.Request) -> str:
    queue = request.match_info["queue"]
    if not _QUEUE_ID.fullmatch(queue) or queue in _DOTS:
        raise ApiError(422, "invalid_id", f"queue id must match {QUEUE_ID_PATTERN}")
    return queue


def _ids(request: web.Request) -> tuple[str, str]:
    job_id = request.match_info["id"]
    if not is_job_id(job_id):
        raise ApiError(422, "invalid_id", f"job id must match {JOB_ID_PATTERN}")
    return _queue_id(request), job_id


def job_out(job: Job, history: JobHistory | None = None,
            waiting: dict[str, Any] | None = None) -> JobOut:
    """The job JSON; with ``history`` (GET of one job), the entries read and their
    total count, and why it waits (``waiting``, docs/throttling.md)."""
    body = job.to_json() | {"history": [a.to_json() for a in history.tries] if history else [],
                            "history_count": history.total if history else None,
                            "waiting": waiting}
    return JobOut.model_validate(body)


def queue_out(record: QueueRecord, stats: QueueStats | None, *, admin: bool,
              snapshot: Snapshot | None = None, now: datetime | None = None) -> QueueOut:
    """The queue as JSON: secrets as "***"; for other roles than admin, the target
    URL without userinfo and with its query values masked too. With ``snapshot``,
    the partner's word on it (docs/throttling.md) at ``now``."""
    config = QueueConfig.model_validate(redacted(queue_config(record), urls=not admin))
    word: dict[str, Any] = {}
    if snapshot is not None and now is not None:
        told = snapshot.word(record.id, record.spec, now)
        word = {"backoff": [b.to_json() for b in
                            snapshot.pauses_in_force(record.id, now, PAUSES_SHOWN)],
                "effective_concurrency": told.effective_concurrency, "held": told.held,
                "throttled_total": told.throttled_total,
                "learned_rate": (None if told.learned_rate is None
                                 else round(told.learned_rate, 3))}
    return QueueOut.model_validate({
        "id": record.id, "paused": record.paused, "config": config,
        "created_at": record.created_at, "updated_at": record.updated_at,
        "stats": None if stats is None else stats_out(stats, snapshot), **word})


def stats_out(stats: QueueStats, snapshot: Snapshot | None) -> QueueStatsOut:
    """A queue's counts, with its rows in the intake not ingested yet
    (docs/from-your-database.md)."""
    out = QueueStatsOut.model_validate(stats, from_attributes=True)
    pending = 0 if snapshot is None else snapshot.intake_pending(stats.queue)
    return out.model_copy(update={"intake": pending}) if pending else out


async def _one_queue(request: web.Request, queue: str) -> QueueOut:
    """One queue with its counts and the partner's word from the shared snapshot (no
    per-request scan); a queue newer than the snapshot has no jobs yet: zeros."""
    service = _service(request)
    record = await service.get_queue(queue)
    snapshot = await request.app[STATS].get()
    stats = snapshot.queue(queue, paused=record.paused)
    if stats is None:
        stats = QueueStats(queue=queue, paused=record.paused, queued=0, due=0, running=0,
                           running_weight=0, oldest_due_age_seconds=None,
                           concurrency=record.spec.concurrency)
    return queue_out(record, stats, admin=request_role(request) is Role.ADMIN,
                     snapshot=snapshot, now=service.clock.now())


# -- queues ----------------------------------------------------------------------


async def create_queue(request: web.Request) -> web.Response:
    config = await read_body(request, QueueConfig)
    check_plugin_modules(config, request.app[DEPS].config.plugin_modules)  # before any import
    service = _service(request)
    try:
        stored: QueueConfig | None = queue_config(await service.get_queue(config.id))
    except QueueNotFound:
        stored = None
    config = keep_secrets(config, stored)
    created = await service.create_queue(config)
    answer = reply(await _one_queue(request, config.id), 201 if created else 200)
    declared = request.app[DEPS].declared_queues.get(config.id)
    if declared is not None and config != declared:
        warning = declared_queue_warning(config.id)
        log.warning("%s", warning, extra={"action": "queue_declared_updated"})
        answer.headers[WARNING_HEADER] = warning
    return answer


WARNING_HEADER = "Hipq-Warning"


def declared_queue_warning(queue: str) -> str:
    """What an API update of a queue declared in the config file is told (and the
    log says): it stands until the daemon restarts (docs/configuration.md)."""
    return (f"queue {queue!r} is declared in the daemon's config file: these settings "
            "replace the file's until the daemon restarts, which applies the file's again "
            "(change the file, or use another queue id)")


async def list_queues(request: web.Request) -> web.Response:
    service = _service(request)
    snapshot = await request.app[STATS].get()
    stats = {s.queue: s for s in snapshot.queues}
    records = await service.list_queues()
    admin, now = request_role(request) is Role.ADMIN, service.clock.now()
    return reply(QueueList(queues=[queue_out(r, stats.get(r.id), admin=admin,
                                             snapshot=snapshot, now=now)
                                   for r in records]))


async def get_queue(request: web.Request) -> web.Response:
    return reply(await _one_queue(request, _queue_id(request)))


async def pause_queue(request: web.Request) -> web.Response:
    await _service(request).set_paused(_queue_id(request), True)
    return reply(await _one_queue(request, _queue_id(request)))


async def resume_queue(request: web.Request) -> web.Response:
    await _service(request).set_paused(_queue_id(request), False)  # ends partner pauses too
    request.app[STATS].forget_pauses(_queue_id(request))
    return reply(await _one_queue(request, _queue_id(request)))


# -- jobs ------------------------------------------------------------------------


async def enqueue(request: web.Request) -> web.Response:
    queue = _queue_id(request)
    job_id = request.match_info["id"]
    body = await read_body(request, EnqueueRequest, empty={})
    service = _service(request)
    outcome = await service.enqueue(queue, None if job_id == RANDOM_ID else job_id, body,
                                    trace=tracing.from_headers(request.headers))
    job = outcome.job or (await service.get_job(queue, outcome.id))[0]
    return reply(job_out(job), 201 if outcome.status is InsertStatus.CREATED else 200)


class _UncheckedItem(BatchItem):
    """A batch item whose ``data`` the handler checks itself: all items' data in one
    walk (:func:`_validated_items`) instead of one validator call per item."""

    data: dict[str, Any] = Field(default_factory=dict)


_BATCH_ITEMS: TypeAdapter[list[_UncheckedItem]] = TypeAdapter(list[_UncheckedItem])


def _batch_item(raw: Any) -> tuple[str, EnqueueRequest | str]:
    """(id, request) for a valid item, (id or "", error) for an invalid one."""
    given = raw.get("id") if isinstance(raw, dict) else None
    problem = type_problem(raw, BatchItem)  # the published types first: no 0 for false
    if problem is not None:
        where = ".".join(str(p) for p in problem[0]) or "item"
        return (given if isinstance(given, str) else ""), f"{where}: {problem[1]}"
    try:
        item = BatchItem.model_validate(raw)
    except PydanticValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "item"
        return (given if isinstance(given, str) else ""), f"{where}: {first['msg']}"
    return item.id, item


BatchParsed = list[tuple[str, EnqueueRequest | DataOnly | str]]


def _validated_items(raw: list[Any]) -> BatchParsed:
    """All items in one validation when all are valid, else item by item so each bad
    one gets its own error."""
    try:
        items = _BATCH_ITEMS.validate_python(raw)
    except PydanticValidationError:
        return [_batch_item(item) for item in raw]
    # the list is one level more: the same depth limit for each item's data
    if (json_problem([item.data for item in items], max_depth=MAX_DEPTH + 1) is not None
            or any(type_problem(item, BatchItem) for item in raw)):
        return [_batch_item(item) for item in raw]
    return [(item.id, item) for item in items]


_ID_AND_DATA = frozenset({"id", "data"})
_NO_DATA = object()


def _batch_items(raw: list[Any]) -> BatchParsed:
    """(id, request) for each valid item, (id or "", error) for each invalid one.

    The usual item, ``{"id": ..., "data": {...}}`` (or no ``data``) with a valid id
    and an object as data, becomes a :class:`~hipq.bodies.DataOnly` without a model:
    such an item is valid exactly when its data is storable (checked for all such
    items in one walk), and is then what the models make of it. Any other item is
    validated by the models (:func:`_validated_items`), as is every item when some
    data is not storable, so each bad one gets the models' own error."""
    parsed: list[tuple[str, Any]] = []
    others: list[int] = []  # the positions of the items the models validate
    for position, item in enumerate(raw):
        if type(item) is dict and item.keys() <= _ID_AND_DATA:
            job_id, data = item.get("id"), item.get("data", _NO_DATA)
            if data is _NO_DATA:
                data = {}
            if type(job_id) is str and type(data) is dict and is_job_id(job_id):
                parsed.append((job_id, data))
                continue
        parsed.append(("", None))
        others.append(position)
    if len(others) == len(raw):
        return _validated_items(raw)
    if json_problem([data for _, data in parsed if data is not None],
                    max_depth=MAX_DEPTH + 1) is not None:
        return _validated_items(raw)
    made: BatchParsed = [(job_id, DataOnly.of(data)) if data is not None
                         else ("", "")  # the models' answer, below
                         for job_id, data in parsed]
    if others:
        validated = _validated_items([raw[p] for p in others])
        for position, one in zip(others, validated, strict=True):
            made[position] = one
    return made


async def enqueue_batch(request: web.Request) -> web.Response:
    queue = _queue_id(request)
    envelope = await read_body(request, BatchEnvelope, check=False)  # items one by one
    parsed = _batch_items(envelope.jobs)
    valid = [(i, r) for i, r in parsed if not isinstance(r, str)]
    outcomes = iter(await _service(request).enqueue_many(
        queue, valid, trace=tracing.from_headers(request.headers)))
    # BatchOut's shape, encoded directly (up to 10,000 items: no model per item); a
    # valid item's id is made of [A-Za-z0-9_.:-] only, so it needs no escaping
    results: list[str] = []
    for job_id, item in parsed:
        if isinstance(item, str):
            # the id as given, escaped: it may hold a lone surrogate (no UTF-8 for it)
            results.append(_ENCODE_ASCII({"id": job_id, "status": InsertStatus.INVALID.value,
                                          "error": item}))
            continue
        o = next(outcomes)
        if o.error is None:
            results.append(f'{{"id":"{o.id}","status":"{o.status.value}","error":null}}')
        else:
            results.append(_ENCODE({"id": o.id, "status": o.status.value, "error": o.error}))
    body = '{"jobs":[' + ",".join(results) + "]}"
    return web.Response(body=body.encode(), content_type="application/json")


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_ENCODE_ASCII = json.JSONEncoder(separators=(",", ":")).encode


async def get_job(request: web.Request) -> web.Response:
    """The job with the last ``HISTORY_SHOWN`` entries of its history and their count,
    and, while it is queued, why it waits."""
    service = _service(request)
    job, history = await service.job_with_history(*_ids(request), last=HISTORY_SHOWN)
    return reply(job_out(job, history, await service.waiting(job)))


async def cancel_job(request: web.Request) -> web.Response:
    job = await _service(request).cancel(*_ids(request))
    return reply(job_out(job), 200 if job.status is JobState.CANCELLED else 202)


async def report_status(request: web.Request) -> web.Response:
    queue, job_id = _ids(request)
    response = await read_body(request, ResponseRequest)
    row = await _service(request).report_status(queue, job_id, response)
    return reply(AcceptedOut(duplicate=row is None), 202)


async def replay_job(request: web.Request) -> web.Response:
    return reply(job_out(await _service(request).replay(*_ids(request))), 201)


async def archived_jobs(request: web.Request) -> web.Response:
    """A page of at most ``limit`` jobs and about :data:`~hipq.api.paging.PAGE_BYTES` of JSON (at
    least one job): :func:`~hipq.api.paging.collect_page`."""
    query = read_query(request, ArchivedQuery)
    service = _service(request)

    async def read(limit: int, after: tuple[datetime, str, str] | None) -> list[Job]:
        return await service.list_archived(queue=query.name, status=query.status,
                                           limit=limit, after=after)

    page, last, more = await collect_page(
        read, _archived_json, _archived_key, limit=query.limit,
        after=None if query.cursor is None else decode_cursor(query.cursor))
    key = _archived_key(last[0]) if more and last else None
    cursor = None if key is None else encode_cursor(*key)
    body = '{"jobs":[' + ",".join(page) + '],"next_cursor":' + json.dumps(cursor) + "}"
    return web.Response(body=body.encode(), content_type="application/json")


# -- responses -------------------------------------------------------------------


# the query of a signed URL as hipq makes it (signing.py: plain token, hex signature):
# read without parsing the query into a mapping and validating a model; any other
# query goes the general way, which says the same of this one (issue 28)
_SIGNED_QUERY = re.compile(
    r"attempt=([1-9][0-9]{0,5}|1000000)&t=([A-Za-z0-9_.~-]{1,200})&sig=([0-9a-f]{1,200})"
).fullmatch
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.~:-]*").fullmatch  # JSON-encodes as itself


def _callback_query(request: web.Request) -> tuple[int, str, str]:
    """The (attempt, token, signature) of a signed callback URL; 401 without them."""
    plain = _SIGNED_QUERY(request.rel_url.raw_query_string)
    if plain is not None:
        return int(plain[1]), plain[2], plain[3]
    try:
        query = read_query(request, CallbackQuery)
    except PydanticValidationError:
        raise ApiError(401, "unauthorized", "the callback URL is not signed") from None
    return query.attempt, query.t, query.sig


def _accepted(duplicate: bool, key: str) -> web.Response:
    """``reply(AcceptedOut(duplicate=..., correlation_key=key), 202)``, for a plain
    key without the model."""
    if not _PLAIN_KEY(key):
        return reply(AcceptedOut(duplicate=duplicate, correlation_key=key), 202)
    body = (b'{"accepted":true,"duplicate":' + (b"true" if duplicate else b"false")
            + b',"correlation_key":"' + key.encode() + b'"}')
    return web.Response(body=body, status=202, content_type="application/json")


async def signed_response(request: web.Request) -> web.Response:
    deps = request.app[DEPS]
    key = request.match_info["key"]
    attempt, token, signature = _callback_query(request)
    if not deps.signer.verify(key, attempt, token, signature):
        raise ApiError(401, "unauthorized", "the callback URL's signature is not valid")
    response = await read_body(request, ResponseRequest, empty={})
    row = await deps.service.report_callback(key, attempt, token, response)
    return _accepted(row is None, key)


async def templated_response(request: web.Request) -> web.Response:
    queue = _queue_id(request)
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_request", "the response body must be a JSON object")
    fields = {k: body[k] for k in ResponseRequest.model_fields if k in body}
    fields.setdefault("result", body)
    response = ResponseRequest.model_validate(fields)
    scope = {"body": body, "query": dict(request.query),
             "path": {"queue": queue, "tail": request.match_info.get("tail", "")}}
    key, row = await _service(request).report_by_template(queue, scope, response)
    return reply(AcceptedOut(duplicate=row is None, correlation_key=key), 202)


# -- operations ------------------------------------------------------------------


async def stats(request: web.Request) -> web.Response:
    snapshot = await request.app[STATS].get()
    queues = [stats_out(s, snapshot) for s in snapshot.queues]
    counts = ResponseCounts.model_validate(snapshot.responses)
    return reply(StatsOut(queues=queues, responses=counts,
                          intake=IntakeCounts.model_validate(snapshot.intake_totals())))


async def healthz(request: web.Request) -> web.Response:
    """Open to anyone: says only whether the database answers (the cause is logged);
    with ``?nonce=``, proves the signing key on this connection (docs/http-api.md)."""
    nonce = read_query(request, HealthQuery).nonce
    try:
        await _service(request).store.ping()
    except Exception as exc:  # whatever the driver raised, the answer is the same
        log.warning("health check: the database does not answer: %s", exc,
                    extra={"action": "healthz_failed"})
        raise ApiError(503, "store_unavailable", "database unavailable") from None
    return reply(HealthOut(status="ok", database="ok",
                           instance=request.app[DEPS].signer.instance(),
                           proof=None if nonce is None else _proof(request, nonce)))


def _proof(request: web.Request, nonce: str) -> str | None:
    """The signing key's answer to ``nonce`` on the connection it came on (its two
    ends as this daemon sees them), so no one can relay it from another address."""
    transport = request.transport
    if transport is None:
        return None
    connection = connection_name(transport.get_extra_info("sockname"),
                                 transport.get_extra_info("peername"))
    return None if connection is None else request.app[DEPS].signer.prove(nonce, connection)


def _archived_json(job: Job) -> str:
    return job_out(job).model_dump_json()


def _archived_key(job: Job) -> tuple[datetime, str, str] | None:
    return None if job.finished_at is None else (job.finished_at, job.queue, job.id)

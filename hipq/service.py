"""The Python API: everything a user can do, for embedding, the CLI and the HTTP API.

Handlers stay thin: they validate input and call these methods. The service never
runs a tick itself; it writes to the database and tells the engine of a daemon in
the same process (``engine``: :class:`hipq.engine.facade.EngineLink`), which wakes
its reconcile loop early.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from hipq import json_text, tracing
from hipq.bodies import DataOnly, EnqueueRequest, ResponseRequest
from hipq.clock import Clock, SystemClock
from hipq.config import HttpTarget as HttpTargetConfig
from hipq.config import QueueConfig
from hipq.engine.throttle import build_throttler
from hipq.errors import (
    ConfigError,
    ConflictError,
    JobNotFound,
    QueueNotFound,
    StaleResponse,
    ValidationError,
)
from hipq.frozen import evolver
from hipq.intake_rows import request_of
from hipq.jobs import (
    GENERATED_KEY_PREFIX,
    Attempt,
    Job,
    JobState,
    NewJobs,
    ResponseStatus,
    expired_error,
    is_job_id,
)
from hipq.pause_scope import group_of
from hipq.responses import correlation
from hipq.responses.batcher import Batcher
from hipq.responses.correlation import request_key, response_key
from hipq.retry import build_retry
from hipq.store import (
    InsertOutcome,
    InsertStatus,
    JobHistory,
    ListedResponse,
    QueueRecord,
    QueueStats,
    Response,
    Store,
)
from hipq.store.records import written_rows
from hipq.targets.http import HttpTarget
from hipq.throttling import field_value, next_open
from hipq.throttling.windows import validate as validate_windows
from hipq.waiting import POSITION_CAP, Facts, verdict

if TYPE_CHECKING:
    from hipq.engine.facade import EngineLink

YIELD_EVERY = 250  # jobs built between two yields to the event loop
QUEUE_CACHE_SECONDS = 1.0  # how stale an enqueue may see a queue changed by another daemon


def new_job_id() -> str:
    return str(uuid.uuid4())


class Hipq:
    def __init__(self, store: Store, *, clock: Clock | None = None,
                 engine: EngineLink | None = None,
                 on_enqueued: Callable[[str, int], None] | None = None,
                 partners: Collection[str] | None = None) -> None:
        self.store = store
        # the partners declared in the settings (None: not checked, as in tests)
        self.partners = None if partners is None else frozenset(partners)
        # the engine of this process, told of the work and the responses written here
        # (it applies the inbox rows without reading them back, and knows the tries it
        # holds); None: no engine runs here
        self.engine = engine
        self.on_enqueued = on_enqueued  # (queue, jobs created): metrics
        self.clock = clock or SystemClock()
        # queue settings for enqueues, read at most once per QUEUE_CACHE_SECONDS
        self._configs: dict[str, tuple[float, QueueConfig]] = {}
        # group commit: concurrent responses share one INSERT, concurrent callbacks
        # one lookup of their jobs
        self._inbox: Batcher[Response, int | None] = Batcher(self._insert_responses)
        self._keys: Batcher[str, Job | None] = Batcher(self._lookup_keys)

    async def _insert_responses(self, responses: list[Response]) -> list[int | None]:
        now = self.clock.now()
        ids = await self.store.inbox_insert_many(responses, now=now)
        if self.engine is not None:
            self.engine.responses_written(written_rows(responses, ids, now))
        return ids

    async def _lookup_keys(self, keys: list[str]) -> list[Job | None]:
        found = await self.store.job_keys_lookup(keys)
        return [found.get(key) for key in keys]

    def _wake(self) -> None:
        if self.engine is not None:
            self.engine.work_arrived()

    # -- queues ----------------------------------------------------------------

    async def create_queue(self, config: QueueConfig) -> bool:
        """Create or update a queue. Returns True if it was created."""
        validate_queue(config)
        if (config.partner is not None and self.partners is not None
                and config.partner not in self.partners):
            known = ", ".join(sorted(self.partners)) or "none"
            raise ValidationError(f"queue {config.id!r}: partner {config.partner!r} is not "
                                  f"declared under partners (declared: {known})")
        created = await self.store.queue_upsert(config.stored(), now=self.clock.now())
        self._configs.pop(config.id, None)
        self._wake()
        return created

    async def get_queue(self, queue: str) -> QueueRecord:
        record = await self.store.queue_get(queue)
        if record is None:
            raise QueueNotFound(queue)
        return record

    async def _enqueue_config(self, queue: str) -> QueueConfig:
        """The queue's settings for an enqueue: cached briefly (a busy API would
        otherwise read and re-validate them once per request). A change made through
        this service is seen at once, one made elsewhere within QUEUE_CACHE_SECONDS."""
        now = time.monotonic()
        cached = self._configs.get(queue)
        if cached is not None and now - cached[0] < QUEUE_CACHE_SECONDS:
            return cached[1]
        config = queue_config(await self.get_queue(queue))
        self._configs[queue] = (now, config)
        return config

    async def list_queues(self) -> list[QueueRecord]:
        return await self.store.queue_list()

    async def set_paused(self, queue: str, paused: bool) -> QueueRecord:
        """Pause or resume a queue; a resume also ends its partner's pauses and makes the
        jobs they held back due now (docs/throttling.md: cleared first, then the record
        is touched, so its owner reloads them)."""
        if not paused:
            await self.store.backoff_clear(queue=queue, now=self.clock.now())
        if not await self.store.queue_set_paused(queue, paused, now=self.clock.now()):
            raise QueueNotFound(queue)
        self._configs.pop(queue, None)
        self._wake()
        return await self.get_queue(queue)

    async def stats(self) -> list[QueueStats]:
        return await self.store.queue_stats(now=self.clock.now())

    # -- jobs --------------------------------------------------------------------

    async def enqueue(self, queue: str, job_id: str | None,
                      request: EnqueueRequest, *, trace: str | None = None) -> InsertOutcome:
        """Enqueue one job. A repeat with the same body returns the existing job
        (``EXISTS``); the same id with another body raises :class:`ConflictError`.
        ``trace``: the trace context of the request (docs/traces.md)."""
        (outcome,) = await self.enqueue_many(queue, [(job_id or new_job_id(), request)],
                                             trace=trace)
        if outcome.status is InsertStatus.CONFLICT:
            raise ConflictError(outcome.error or "conflict", queue=queue, job_id=outcome.id)
        if outcome.status is InsertStatus.INVALID:
            raise ValidationError(outcome.error or "invalid job")
        return outcome

    async def enqueue_many(self, queue: str,
                           items: Sequence[tuple[str, EnqueueRequest | DataOnly]], *,
                           trace: str | None = None) -> list[InsertOutcome]:
        """Enqueue many jobs in few statements; one outcome per item, in order (a
        :class:`~hipq.bodies.DataOnly` item as its ``EnqueueRequest``).
        ``trace``: the stored form of the request's trace context (hipq.tracing), for
        every item without its own ``traceparent``."""
        config = await self._enqueue_config(queue)
        now = self.clock.now()
        spans = tracing.tracer().enqueue_spans(queue)
        results: dict[int, InsertOutcome] = {}
        jobs: list[tuple[int, Job]] = []
        tokens = os.urandom(16 * len(items)).hex()  # one system call per batch
        build = JobBuilder(config, now)
        for index, (job_id, request) in enumerate(items):
            if index and not index % YIELD_EVERY:
                await asyncio.sleep(0)  # noqa: TID251 (a yield: the reconcile loop runs meanwhile)
            job_trace = trace if request.traceparent is None else request.trace
            if spans is not None and job_trace is not None:
                job_trace = spans.parent(job_trace, job_id)
            try:
                jobs.append((index, build(job_id, request, tokens[32 * index:32 * index + 32],
                                          job_trace)))
            except ValidationError as exc:
                results[index] = InsertOutcome(id=job_id, status=InsertStatus.INVALID,
                                               error=str(exc))
        merging = [(i, j) for i, j in jobs if config.merge_by_ordering_key and j.ordering_key]
        plain = [(i, j) for i, j in jobs if not (config.merge_by_ordering_key and j.ordering_key)]
        inserted = await self.store.job_insert_many(build.new_jobs([job for _, job in plain]))
        for (index, _), outcome in zip(plain, inserted, strict=True):
            results[index] = outcome
        for index, job in merging:  # one by one, in order: payloads accumulate in order
            results[index] = await self.store.job_merge(job)
            inserted.append(results[index])
        if spans is not None:
            spans.end([(job.id, results[i].status.value) for i, job in jobs
                       if job.trace is not None])
        created = [o.status for o in inserted].count(InsertStatus.CREATED)
        if created:
            self._wake()
            if self.on_enqueued is not None:
                self.on_enqueued(queue, created)
        return [results[i] for i in range(len(items))]

    async def get_job(self, queue: str, job_id: str) -> tuple[Job, list[Attempt]]:
        """The job and its whole history (``hipq show``); a job's JSON carries only
        the last entries (:meth:`job_with_history`)."""
        job = await self._job(queue, job_id)
        return job, await self.store.job_attempts(queue, job_id)

    async def job_with_history(self, queue: str, job_id: str, *,
                               last: int) -> tuple[Job, JobHistory]:
        """The job, the last ``last`` entries of its history and how many it has in
        all (a job's JSON, docs/http-api.md): at most ``last`` history rows are read."""
        job = await self._job(queue, job_id)
        return job, await self.store.job_history(queue, job_id, limit=last)

    async def _job(self, queue: str, job_id: str) -> Job:
        """The job wherever it is, without its history (still in the intake: as it
        will be enqueued, ``queued``); JobNotFound if there is none."""
        job = await self.store.job_get(queue, job_id)
        if job is None:
            job = await self._from_intake(queue, job_id)
        if job is None:
            raise JobNotFound(queue, job_id)
        return job

    async def _from_intake(self, queue: str, job_id: str) -> Job | None:
        """A job enqueued from SQL and not ingested yet (docs/from-your-database.md), as
        its row says."""
        row = await self.store.intake_find(queue, job_id)
        if row is None:
            return None
        _, item = request_of(row)
        record = await self.store.queue_get(queue)
        if item is None or record is None or row.enqueued_at is None:
            return None  # it will be rejected: GET /v1/intake?status=rejected
        try:
            return build_job(queue_config(record), item[0], item[1], row.enqueued_at, token="",
                             trace=item[1].trace)
        except ValidationError:
            return None

    async def waiting(self, job: Job) -> dict[str, Any] | None:
        """Why a queued job waits, as the database says now (docs/throttling.md; the reasons in
        :mod:`hipq.waiting`): ``{"reason", "detail", "until"}``; None for a job that
        is not queued."""
        if job.status is not JobState.QUEUED:
            return None
        record = await self.store.queue_get(job.queue)
        if record is None:
            return None
        facts = Facts(job=job, queue=record.spec, now=self.clock.now(),
                      paused=record.paused)
        if not facts.paused and job.run_at <= facts.now:  # else nothing more matters
            facts = await self._wait_facts(facts)
        return verdict(facts).to_json()

    async def _wait_facts(self, facts: Facts) -> Facts:
        """The rest of the facts, each read only where it can matter (bounded reads)."""
        job, spec, now, store = facts.job, facts.queue, facts.now, self.store
        state = ((await store.queue_state_list(queues=[job.queue])).get(job.queue)
                 if spec.adaptive is not None else None)
        recent: dict[str, list[datetime]] = {}
        if spec.rate_limit is not None and not job.critical:
            recent = await store.launch_events_recent(
                queue=job.queue, since=now - timedelta(seconds=spec.rate_limit.per_seconds))
        standing = await store.job_standing(job=job, now=now, ordering=spec.ordering,
                                            limit=POSITION_CAP + 1,
                                            key_mode=spec.ordering_key_mode)
        return replace(facts, backoffs=await store.backoff_list(queues=[job.queue]),
                       effective=None if state is None else state.effective,
                       key_ahead=standing.key_ahead, recent_launches=recent,
                       running=standing.running, ahead=standing.ahead)

    async def cancel(self, queue: str, job_id: str) -> Job:
        """Cancel a queued job at once, or ask the owner of a running one to cancel
        it (applied at its next tick). A finished job cannot be cancelled."""
        now = self.clock.now()
        cancelled = await self.store.job_cancel_queued(queue=queue, job_id=job_id, now=now)
        if cancelled is not None:
            return cancelled
        job = await self._job(queue, job_id)
        if job.status is JobState.RUNNING and job.correlation_key:
            await self.store.inbox_insert_many(
                [Response(correlation_key=job.correlation_key, attempt=job.attempt,
                          status=ResponseStatus.CANCELLED, retryable=False, source="cancel")],
                now=now)
            if self.engine is not None:
                self.engine.responses_arrived()
            self._wake()
            return job
        raise ConflictError(f"job {job_id!r} is {job.status} and cannot be cancelled",
                            queue=queue, job_id=job_id)

    async def replay(self, queue: str, job_id: str) -> Job:
        """A new job with the same data, queued now (``replay_of`` set). Replaying an
        expired job archives the new one as expired at once."""
        original = await self._job(queue, job_id)
        if not original.status.terminal:
            raise ConflictError(f"job {job_id!r} is {original.status}; only finished jobs "
                                "can be replayed", queue=queue, job_id=job_id)
        now = self.clock.now()
        request = EnqueueRequest(data=original.data, priority=original.priority,
                                 weight=original.weight, expires_at=original.expires_at,
                                 timeout_seconds=original.timeout_seconds,
                                 ordering_key=original.ordering_key, critical=original.critical)
        config = queue_config(await self.get_queue(queue))
        job = replace(build_job(config, new_job_id(), request, now, trace=original.trace),
                      replay_of=original.id,
                      data=original.data)
        (outcome,) = await self.store.job_insert_many([job])
        if original.status is JobState.EXPIRED or (job.expires_at and job.expires_at <= now):
            error = expired_error("replay of an expired job").to_json()
            ended = await self.store.job_archive_queued_many(
                queue=queue, ends={job.id: (JobState.EXPIRED.value, error)}, now=now)
            return ended[0] if ended else job
        self._wake()
        return outcome.job or job

    # -- responses ---------------------------------------------------------------

    async def report_response(self, correlation_key: str, response: ResponseRequest, *,
                              source: str = "api", dedup_key: str | None = None,
                              token: str | None = None,
                              attempt: int | None = None) -> int | None:
        """Write a response durably into the inbox (applied at the next tick).
        Returns the inbox row id, or None if ``dedup_key`` was seen before.
        Concurrent calls share one INSERT (group commit); each returns only once
        its own row is committed. ``attempt``, if given, stands for the response's."""
        row_id = await self._inbox.submit(
            Response(correlation_key=correlation_key,
                     attempt=response.attempt if attempt is None else attempt,
                     status=response.status, retryable=response.retryable,
                     result=response.result, error=response.error,
                     extend_seconds=response.seconds, source=source,
                     dedup_key=dedup_key, token=token))
        self._wake()
        return row_id

    async def report_status(self, queue: str, job_id: str,
                            response: ResponseRequest) -> int | None:
        """rickover's status callback: the attempt must be the live one."""
        job = await self._job(queue, job_id)
        if (job.status is not JobState.RUNNING or response.attempt is None
                or response.attempt != job.attempt or not job.correlation_key):
            raise StaleResponse(f"job {job_id!r} is {job.status} at attempt {job.attempt}; "
                                f"a response for attempt {response.attempt} is stale",
                                queue=queue, job_id=job_id)
        return await self.report_response(job.correlation_key, response, source="callback")

    async def report_callback(self, correlation_key: str, attempt: int, token: str,
                              response: ResponseRequest) -> int | None:
        """A signed callback for one try of one job (``attempt`` and the job's
        ``token`` come from the signed URL).

        A response for another job (a later one holding the same key), for a try
        older than the job's latest, or for a try other than the running one,
        raises :class:`StaleResponse` and writes nothing. Otherwise
        it goes to the inbox (a late one, for a try that already ended, is recorded
        on the job's history; an unknown key waits ``responses.buffer_seconds``).
        A repeat of the same final response is stored once (returns None)."""
        if self.engine is None or self.engine.live_try(correlation_key) != (token, attempt):
            await self._check_callback(correlation_key, attempt, token)
        dedup = None if response.status == "running" else response_digest(
            correlation_key, response, attempt=attempt)
        return await self.report_response(correlation_key, response, source="http",
                                          dedup_key=dedup, token=token, attempt=attempt)

    async def _check_callback(self, correlation_key: str, attempt: int, token: str) -> None:
        """Raise StaleResponse unless the callback is for the job that holds the key
        (or held it last) and for its latest try; the database's view. A try this
        daemon holds in memory needs no such read (:meth:`EngineLink.live_try`)."""
        job = await self._keys.submit(correlation_key)
        if job is None:
            past = await self.store.archived_by_attempt_keys([correlation_key])
            if correlation_key in past:
                job = await self.store.job_get(*past[correlation_key])
        if job is not None and job.token != token:
            raise StaleResponse("this callback URL was issued for another job that held "
                                "the same correlation key", queue=job.queue, job_id=job.id)
        if job is not None and (attempt != job.attempt or (
                job.status is JobState.RUNNING and job.correlation_key != correlation_key)):
            raise StaleResponse(f"job {job.id!r} is at attempt {job.attempt}; a response for "
                                f"attempt {attempt} is stale", queue=job.queue, job_id=job.id)

    async def report_by_template(self, queue: str, scope: Mapping[str, Any],
                                 response: ResponseRequest) -> tuple[str, int | None]:
        """A response whose key the queue's ``correlation.response`` template (or
        plugin) finds in ``scope``; returns the key and the inbox row id."""
        config = queue_config(await self.get_queue(queue))
        key = response_key(config.correlation, scope)
        return key, await self.report_response(key, response, source="http")

    async def list_archived(self, *, queue: str | None = None, status: str | None = None,
                            limit: int = 100, after: tuple[datetime, str, str] | None = None,
                            ) -> list[Job]:
        """Archived jobs, newest first; ``after`` is the key of the last one seen."""
        return await self.store.job_list_archived(queue=queue, status=status, limit=limit,
                                                  after=after)

    async def list_unmatched(self, *, limit: int = 100, after: tuple[datetime, int] | None = None,
                             value_chars: int = 4096) -> list[ListedResponse]:
        """Responses recorded as unmatched, newest first; ``after`` is the
        (received_at, id) of the last one seen; result and error cut to
        ``value_chars`` characters of JSON text (see the store)."""
        return await self.store.inbox_list_unmatched(limit=limit, after=after,
                                                     value_chars=value_chars)

    async def response_counts(self) -> dict[str, int]:
        """Inbox responses by outcome: pending, applied, duplicate, stale, late, unmatched."""
        return await self.store.inbox_counts()


_DIGEST_JSON = json_text.encoder(sort_keys=True, separators=(",", ":"), default=str)


def response_digest(correlation_key: str, response: ResponseRequest, *,
                    attempt: int | None = None) -> str:
    """SHA-256 of the key and the response's fields (``attempt`` standing for its
    attempt, if given) as sorted JSON: the fields as ``model_dump(mode="json")`` has
    them, read directly (a callback's values come from a JSON parser) with an
    encoder made once (issue 28)."""
    fields = {"status": response.status,
              "attempt": response.attempt if attempt is None else attempt,
              "retryable": response.retryable, "result": response.result,
              "error": response.error, "extend_seconds": response.extend_seconds,
              "retry_after_seconds": response.retry_after_seconds}
    return hashlib.sha256(_DIGEST_JSON([correlation_key, fields]).encode()).hexdigest()


def queue_config(record: QueueRecord) -> QueueConfig:
    """A queue's stored settings as the edge's model, validated again (the store
    keeps them as JSON): what builds its jobs and what the API echoes."""
    return QueueConfig.model_validate(record.settings)


def validate_queue(config: QueueConfig) -> None:
    """Build the queue's plugins (and an HTTP target) once, so a bad plugin path, a
    bad ``auth`` or a header that would break a request fails at creation."""
    try:
        build_throttler(config)
        build_retry(config.retry.to_spec())
        correlation.check(config.correlation)
        if isinstance(config.target, HttpTargetConfig):
            HttpTarget(config.target, None)
    except ConfigError as exc:
        raise ValidationError(f"queue {config.id!r}: {exc}") from None


def build_job(config: QueueConfig, job_id: str, request: EnqueueRequest,
              now: datetime, *, token: str | None = None, trace: str | None = None) -> Job:
    """A new queued job from an enqueue request, under the queue's settings.
    ``token`` (random, 32 hex digits) seeds the job's correlation keys; ``trace`` is
    the trace context to store with it (hipq.tracing)."""
    if not is_job_id(job_id):
        raise ValidationError(f"job id {job_id!r} must be 1-200 characters of "
                              "[A-Za-z0-9_.:-], and not '.' or '..'")
    weight = request.weight or config.default_weight
    if config.concurrency is not None and weight > config.concurrency:
        raise ValidationError(f"weight {weight} is larger than the queue's concurrency "
                              f"{config.concurrency}: the job could never run")
    own_windows = ([w.model_dump() for w in request.time_windows]
                   if request.time_windows is not None else None)
    run_at = _first_open_time(config, own_windows, request, now)
    fixed_key = request.correlation_key
    if fixed_key is None and config.correlation is not None:
        fixed_key = request_key(config.correlation,
                                {"id": job_id, "queue": config.id, "data": request.data})
    if fixed_key is not None and fixed_key.startswith(GENERATED_KEY_PREFIX):
        raise ValidationError(f"correlation key {fixed_key[:100]!r}: keys starting with "
                              f"{GENERATED_KEY_PREFIX!r} are the ones hipq generates")
    data = request.data
    if config.merge_by_ordering_key and request.ordering_key is not None:
        data = {"payloads": [request.data]}
    return Job(
        id=job_id, queue=config.id, data=data, status=JobState.QUEUED,
        run_at=run_at, expires_at=request.expires_at,
        priority=request.priority, weight=weight, critical=request.critical,
        time_windows=own_windows, timezone=request.timezone,
        timeout_seconds=request.timeout_seconds or config.timeout_seconds,
        correlation_key=fixed_key, correlation_fixed=fixed_key is not None,
        ordering_key=request.ordering_key, key_order_at=run_at,
        group_key=(_quota_key(request.data, config.quotas.field)
                   if config.quotas is not None else None),
        attempt=0, max_attempts=config.attempts,
        created_at=now, updated_at=now, token=token or uuid.uuid4().hex,
        body_hash=request.body_hash(), trace=trace,
    )


# a job of a DataOnly request: the defaults' job with these fields of its own
_COPY = evolver(Job, ("id", "data", "token", "body_hash", "trace"))
def _quota_key(data: dict[str, Any], path: str) -> str | None:
    """The quota field's value, stored with the job (and indexed, so bounded: a long
    value is kept as a pause's group is, :func:`hipq.pause_scope.group_of`; the quota
    groups named in settings are short, so each is its own key)."""
    value = field_value(data, path)
    return None if value is None else group_of(value)


_COPY_GROUPED = evolver(Job, ("id", "data", "token", "body_hash", "trace", "group_key"))
_UNBUILT = object()


class JobBuilder:
    """:func:`build_job` for the items of one enqueue under ``config`` at ``now``.

    The job of a :class:`~hipq.bodies.DataOnly` item differs from the job of
    ``EnqueueRequest()`` (the defaults) only in its id, data, token, body hash and
    trace, and its quota group: that job is built once, on the first such item, and
    copied with these (no model, no settings read per item). Where the job depends
    on more of the data (a correlation key made from it) or the defaults make no
    job (build_job says why, item by item), each item goes through build_job as
    ``EnqueueRequest(data=...)``; so does every other request."""

    __slots__ = ("_template", "_texts", "config", "now")

    def __init__(self, config: QueueConfig, now: datetime) -> None:
        self.config, self.now = config, now
        self._template: Any = _UNBUILT
        # the data text of each job built so far, while each one came with its own
        self._texts: list[str] | None = []

    def __call__(self, job_id: str, request: EnqueueRequest | DataOnly, token: str,
                 trace: str | None) -> Job:
        if isinstance(request, DataOnly):
            template = self._template
            if template is _UNBUILT:
                template = self._template = self._defaults_job()
            if template is not None:
                if self._texts is not None:
                    self._texts.append(request.text)
                quotas = self.config.quotas
                if quotas is None:
                    return _COPY(template, job_id, request.data, token, request.body_hash(),
                                 trace)
                return _COPY_GROUPED(template, job_id, request.data, token,
                                     request.body_hash(), trace,
                                     field_value(request.data, quotas.field))
            request = request.request()
        self._texts = None
        return build_job(self.config, job_id, request, self.now, token=token, trace=trace)

    def new_jobs(self, jobs: list[Job]) -> list[Job]:
        """``jobs`` (those built, in order, less the ones merged) with their data texts
        when every one came with its own (:class:`~hipq.jobs.NewJobs`)."""
        if self._texts is None or len(self._texts) != len(jobs):
            return jobs
        return NewJobs(jobs, self._texts)

    def _defaults_job(self) -> Job | None:
        if self.config.correlation is not None:
            return None
        try:
            return build_job(self.config, "defaults", EnqueueRequest(), self.now, token="-")
        except ValidationError:
            return None


def _first_open_time(config: QueueConfig, own_windows: list[dict[str, str]] | None,
                     request: EnqueueRequest, now: datetime) -> datetime:
    """``run_after`` (or now) moved to the first time the job's windows are open."""
    windows = own_windows
    if windows is None and config.time_windows is not None:
        windows = [w.model_dump() for w in config.time_windows]
    start = request.run_after or now
    if not windows:
        return start
    tz = request.timezone or config.timezone
    try:
        validate_windows(windows, tz)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    opening = next_open(windows, tz, start)
    if opening is None:
        raise ValidationError("the time windows can never open")
    return opening

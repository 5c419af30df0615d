"""Rows to records and back, shared by both drivers: plain functions over mappings
(an asyncpg record, or a SQLAlchemy row's ``_mapping``), no database access."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from hipq.jobs import Job, row_reader
from hipq.queue_settings import spec_of
from hipq.store.columns import JOBS_COLUMN_NAMES
from hipq.store.due import RELAXED
from hipq.store.records import (
    InboxPage,
    InboxRow,
    InsertOutcome,
    InsertStatus,
    JobStanding,
    QueueRecord,
    QueueState,
)

JOB_COLUMNS = list(JOBS_COLUMN_NAMES)  # no SQLAlchemy: see hipq.store.columns
INSERT_CHUNK = 500  # rows per generic statement (stays under bind-parameter limits)
CACHE_SIZE = 256  # entries kept by the stores' small caches (queues, compiled queries)


def job_from_row(row: Any) -> Job:
    """A Job from a row of ``jobs`` or ``archived_jobs``: a mapping (an asyncpg
    record, or a SQLAlchemy row's ``_mapping``); the columns of jobs (and
    archived_jobs: finished_at) are Job's fields."""
    return row_reader(tuple(row.keys()))(tuple(row.values()))


def jobs_from_rows(rows: Sequence[Any]) -> list[Job]:
    """Jobs from rows of one result (one column list): the reader is built once."""
    if not rows:
        return []
    read = row_reader(tuple(rows[0].keys()))
    return [read(r) for r in rows]


def job_values(job: Job) -> dict[str, Any]:
    """A job's column values by column name, for an INSERT."""
    return {name: getattr(job, name) for name in JOB_COLUMNS}


def queue_record(row: Any) -> QueueRecord:
    """A QueueRecord from a row of ``queues`` (a mapping): the stored settings with
    the row's ``paused``, and the spec made of them."""
    settings = MappingProxyType({**row["config"], "paused": row["paused"]})
    return QueueRecord(spec=spec_of(settings), settings=settings, paused=row["paused"],
                       created_at=row["created_at"], updated_at=row["updated_at"])


def stored_settings(settings: Mapping[str, Any]) -> tuple[str, dict[str, Any], bool]:
    """What ``queue_upsert`` writes of a queue's settings: its id, the mapping (the
    ``config`` column) and ``paused``."""
    return str(settings["id"]), dict(settings), bool(settings.get("paused", False))


def inbox_row(r: Any) -> InboxRow:
    """An InboxRow from a row of ``response_inbox`` (a mapping)."""
    return InboxRow(id=r["id"], correlation_key=r["correlation_key"], attempt=r["attempt"],
                    status=r["status"], retryable=r["retryable"], result=r["result"],
                    error=r["error"], extend_seconds=r["extend_seconds"],
                    source=r["source"], received_at=r["received_at"], token=r["token"])


NO_BOUND = 2**62  # inbox_pending_scan's max_chars when the caller gives none


def inbox_page(rows: Sequence[Any], limit: int) -> InboxPage:
    """The :class:`InboxPage` of ``inbox_pending_scan``'s rows, each of which carries
    ``page_rows``: how many rows the page held before its size bound cut it."""
    if not rows:
        return InboxPage([], False)
    held = rows[0]["page_rows"]
    return InboxPage([inbox_row(r) for r in rows], more=held >= limit or len(rows) < held)


def inbox_values(r: Any, received_at: Any) -> dict[str, Any]:
    """The column values of a :class:`~hipq.store.records.Response` to insert."""
    return {"correlation_key": r.correlation_key, "attempt": r.attempt, "status": r.status,
            "retryable": r.retryable, "result": r.result, "error": r.error,
            "extend_seconds": r.extend_seconds, "source": r.source,
            "dedup_key": r.dedup_key, "received_at": received_at, "token": r.token}


def inbox_ids_in_order(responses: Sequence[Any],
                       inserted: Iterable[Any]) -> list[int | None]:
    """Each response's new inbox id, in input order, from the (id, dedup_key) rows
    an INSERT returned: None for a duplicate ``dedup_key``, also one repeated
    within the call. Rows without a key were numbered in input order."""
    ids: dict[str | None, int] = {}
    plain: list[int] = []
    for r in inserted:
        if r["dedup_key"] is None:
            plain.append(r["id"])
        else:
            ids[r["dedup_key"]] = r["id"]
    it = iter(sorted(plain))
    return [next(it) if response.dedup_key is None else ids.pop(response.dedup_key, None)
            for response in responses]


def chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def insert_outcome(job: Job, inserted: set[tuple[str, str]],
                   existing: Mapping[tuple[str, str], Job]) -> InsertOutcome:
    """How an enqueued job fared: inserted, or judged against the job stored under
    its (queue, id); neither means its fixed correlation key was in use."""
    if job.key in inserted:
        return InsertOutcome(id=job.id, status=InsertStatus.CREATED, job=job)
    found = existing.get(job.key)
    if found is None:
        return InsertOutcome(id=job.id, status=InsertStatus.CONFLICT,
                             error=f"correlation key {job.correlation_key!r} is in use "
                                   "by another live job")
    if found.body_hash == job.body_hash:
        return InsertOutcome(id=job.id, status=InsertStatus.EXISTS, job=found)
    return InsertOutcome(id=job.id, status=InsertStatus.CONFLICT, job=found,
                         error=f"job {job.id!r} already exists in queue {job.queue!r} "
                               "with a different body")


def repeat_outcome(job: Job, first: InsertOutcome) -> InsertOutcome:
    """A (queue, id) repeated in one call: judged against what its first occurrence
    left stored, so an item is never reported created while another body is kept."""
    stored = {} if first.job is None else {job.key: first.job}
    return insert_outcome(job, set(), stored)


def merged_outcome(job: Job, body_hash: str, host: Job | None) -> InsertOutcome:
    """A repeat of ``job`` in a merging queue, already merged (with ``body_hash``)
    into ``host``: ``exists`` with the same body, else ``conflict``."""
    if body_hash == job.body_hash:
        return InsertOutcome(id=job.id, status=InsertStatus.EXISTS, job=host)
    return InsertOutcome(id=job.id, status=InsertStatus.CONFLICT, job=host,
                         error=f"job {job.id!r} was already merged with a different body")


def merged_into(host: Job, job: Job) -> Job:
    """``host`` with ``job``'s payloads appended (a merging queue's enqueue)."""
    payloads = [*host.data.get("payloads", []), *job.data.get("payloads", [])]
    return replace(host, data={**host.data, "payloads": payloads}, updated_at=job.created_at)


def queue_state_of(r: Any) -> QueueState:
    """A QueueState from a row of ``queue_state`` (``held`` as JSON text or parsed)."""
    held, budget = r["held"], r["budget"]
    if isinstance(held, str):
        held = json.loads(held)
    if isinstance(budget, str):
        budget = json.loads(budget)
    return QueueState(queue=r["queue"], effective=r["effective"], successes=r["successes"],
                      decreased_at=r["decreased_at"], held=held, held_at=r["held_at"],
                      throttled_total=r["throttled_total"], learned_rate=r["learned_rate"],
                      learned_since=r["learned_since"], budget=budget)


def queue_state_values(state: QueueState) -> dict[str, Any]:
    return {"queue": state.queue, "effective": state.effective, "successes": state.successes,
            "decreased_at": state.decreased_at, "held": state.held, "held_at": state.held_at,
            "throttled_total": state.throttled_total, "learned_rate": state.learned_rate,
            "learned_since": state.learned_since, "budget": state.budget}


def standing_of(running: Iterable[Sequence[Any]], key_ahead: str | None,
                ahead: int) -> JobStanding:
    """A JobStanding from (critical, group_key, weight) rows and the two counts."""
    return JobStanding(running={(bool(c), g): int(w) for c, g, w in running},
                       key_ahead=key_ahead, ahead=int(ahead))


def standing_values(job: Job, now: datetime, key_mode: str, limit: int) -> dict[str, Any]:
    """The parameters of a read of ``job``'s standing (PostgreSQL's ``standing_*``)."""
    return {"queue": job.queue, "id": job.id, "ordering_key": job.ordering_key,
            "key_order_at": job.key_order_at, "relaxed": key_mode == RELAXED, "now": now,
            "run_at": job.run_at, "priority": job.priority, "limit": limit}

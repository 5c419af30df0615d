"""What a row of the intake asks for (docs/from-your-database.md, "At ingest"): the
job id and the enqueue body the row's columns make, or why they make none (an
invalid id, fields that are not an object or set a column of their own, a value of
the wrong JSON type, a body the API would refuse). The ingest
(:mod:`hipq.intake`) enqueues what it gets; the service (:mod:`hipq.service`) shows
a row not ingested yet as the job it will be. Pure: no store, no I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import Field, TypeAdapter, ValidationError

from hipq.bodies import EnqueueRequest
from hipq.jobs import JOB_ID_PATTERN, is_job_id
from hipq.json_types import type_problem
from hipq.store.records import IntakeRow, json_value
from hipq.values import MAX_DEPTH, json_problem

_NOT_FIELDS = frozenset({"id", "data", "run_after"})  # columns of their own


class _UncheckedRequest(EnqueueRequest):
    """An enqueue body whose ``data`` :func:`requests_of` checks itself: every
    row's data in one walk instead of one validator call per row."""

    data: dict[str, Any] = Field(default_factory=dict)


_REQUESTS: TypeAdapter[list[_UncheckedRequest]] = TypeAdapter(list[_UncheckedRequest])
Verdict = tuple[str | None, tuple[str, EnqueueRequest] | None]


def requests_of(rows: list[IntakeRow]) -> list[Verdict]:
    """:func:`request_of` for each row: the whole batch in one validation when
    every row is good (the usual case; rows as JSON text are validated as one JSON
    document, never decoded in Python), else row by row, each with its own error.
    Each row's data is one JSON value (PostgreSQL's jsonb text; SQLite's checked by
    the store), so no row's text can reach into another's; a document that does not
    hold one body per row is judged row by row all the same."""
    texts: list[str] = []
    ids: list[str] = []
    for row in rows:
        job_id = row.job_id if row.job_id is not None else f"intake-{row.id}"
        body = None if row.problem is not None else _body_text(row)
        if body is None or not is_job_id(job_id):
            return [request_of(r) for r in rows]
        texts.append(body)
        ids.append(job_id)
    try:
        requests = _REQUESTS.validate_json(f"[{','.join(texts)}]")
    except ValidationError:
        return [request_of(r) for r in rows]
    if len(requests) != len(rows):
        return [request_of(r) for r in rows]
    if json_problem([r.data for r in requests], max_depth=MAX_DEPTH + 1) is not None:
        return [request_of(r) for r in rows]
    return [(None, (job_id, request)) for job_id, request in zip(ids, requests, strict=True)]


def _body_text(row: IntakeRow) -> str | None:
    """The enqueue body of a row as JSON text, built from its columns' text; None
    when that cannot be done simply (the row is then judged on its own)."""
    data, fields = row.data, row.fields
    if isinstance(data, dict):
        data = json.dumps(data)
    if not isinstance(data, str):
        return None
    if isinstance(fields, str) and fields.strip() == "{}":
        head = "{"
    else:
        decoded, problem = json_value(fields)
        if (problem is not None or not isinstance(decoded, dict) or _NOT_FIELDS & set(decoded)
                or type_problem(decoded, EnqueueRequest) is not None):
            return None
        head = json.dumps(decoded)[:-1] + "," if decoded else "{"
    if row.run_after is not None:
        return f'{head}"data":{data},"run_after":"{row.run_after.isoformat()}"}}'
    return f'{head}"data":{data}}}'


def request_of(row: IntakeRow) -> Verdict:
    """The (id, enqueue body) a row asks for, or why it cannot be one."""
    if row.problem is not None:  # the store could not read it (too big, a bad time...)
        return row.problem, None
    job_id = row.job_id if row.job_id is not None else f"intake-{row.id}"
    if not is_job_id(job_id):
        return f"invalid id {job_id[:200]!r}: must match {JOB_ID_PATTERN}", None
    fields, problem = json_value(row.fields)
    if problem is not None:
        return f"fields: {problem}", None
    data, problem = json_value(row.data)
    if problem is not None:
        return f"data: {problem}", None
    if not isinstance(fields, Mapping):
        return "fields must be a JSON object", None
    clash = sorted(_NOT_FIELDS & set(fields))
    if clash:
        return f"fields may not set {', '.join(clash)} (columns of their own)", None
    strict = type_problem(fields, EnqueueRequest)  # the API's JSON types: no 0 for false
    if strict is not None:
        where, message = strict
        return f"invalid: {'.'.join(str(p) for p in where) or 'body'}: {message}", None
    body = {**fields, "data": data}
    if row.run_after is not None:
        body["run_after"] = row.run_after
    try:
        return None, (job_id, EnqueueRequest.model_validate(body))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                             for e in exc.errors(include_url=False))
        return f"invalid: {problems}"[:2000], None

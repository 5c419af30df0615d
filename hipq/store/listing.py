"""Operators' listings of the response inbox and of jobs found by their id: the row
each driver's statement returns, as a record (the statements: SQLite's in
:mod:`hipq.store.sqlite_reads`, PostgreSQL's ``unmatched_page``, ``live_listed`` and
``archived_listed`` in ``postgres.sql``).

A stored ``result`` or ``error`` may be as large as a response body (a Kafka
message, ``api.max_body_bytes``); a listing reads at most ``value_chars``
characters of each: the statement compares the length of the value's JSON text
and returns either the value (``<name>_whole``, short enough) or the cut text
(``<name>_cut``), so a page never carries more than ``limit x 2 x value_chars``
characters of values. A job found by its id (:class:`ListedJob`) is read the same
way, its ``data``, ``result`` and ``error`` each whole or cut (:data:`JOB_VALUES`);
so is each entry of a job's history (``job_history``): an error longer than
:data:`ENTRY_ERROR_CHARS` comes as ``{"kind", "detail", "truncated": true}``, cut.
"""

from __future__ import annotations

import json
from typing import Any

from hipq.jobs import Job
from hipq.store.records import ListedJob, ListedResponse
from hipq.store.rows import job_from_row

VALUES = ("result", "error")  # the values a listing bounds
JOB_VALUES = ("data", "result", "error")  # a listed job's values it bounds
# a history entry's error in a job's JSON: at most this many characters of JSON text,
# else {kind, detail, truncated: true} with its kind and detail cut (a Python
# target's error, its traceback's last 4,000 characters included, fits)
ENTRY_ERROR_CHARS = 8192
_PARTS = ("_whole", "_cut")


def listed_response(row: Any) -> ListedResponse:
    """A :class:`ListedResponse` from a row of an unmatched-responses listing (a
    mapping with ``<name>_whole`` and ``<name>_cut`` for each of :data:`VALUES`)."""
    values = {name: row[f"{name}_whole"] if row[f"{name}_cut"] is None else row[f"{name}_cut"]
              for name in VALUES}
    return ListedResponse(
        id=row["id"], correlation_key=row["correlation_key"], attempt=row["attempt"],
        status=row["status"], source=row["source"], received_at=row["received_at"],
        recorded_at=row["applied_at"], result=values["result"], error=values["error"],
        truncated=tuple(name for name in VALUES if row[f"{name}_cut"] is not None))


def listed_job(row: Any) -> ListedJob:
    """A :class:`ListedJob` from a row of a job listing: the job's columns but
    :data:`JOB_VALUES`, and ``<name>_whole`` and ``<name>_cut`` for each of those."""
    columns = {key: row[key] for key in row.keys()  # noqa: SIM118 (a Record iterates values)
               if not key.endswith(_PARTS)}
    cut: dict[str, str] = {}
    for name in JOB_VALUES:
        if row[f"{name}_cut"] is not None:
            cut[name] = row[f"{name}_cut"]
        elif row[f"{name}_whole"] is not None:
            columns[name] = row[f"{name}_whole"]
    return ListedJob(job=job_from_row(columns), cut=cut)


def cut_job(job: Job, value_chars: int) -> ListedJob:
    """The bound of :func:`listed_job` applied to a job already in memory."""
    cut: dict[str, str] = {}
    values: dict[str, Any] = {}
    for name in JOB_VALUES:
        value = getattr(job, name)
        text = json.dumps(value, ensure_ascii=False)
        if value is not None and len(text) > value_chars:
            cut[name] = text[:value_chars]
            values[name] = {} if name == "data" else None
    return ListedJob(job=job.evolve(**values) if values else job, cut=cut)

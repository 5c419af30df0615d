"""CPU per job of the batch enqueue route (``POST /v1/jobs/{queue}/batch``), in
process, against a throwaway PostgreSQL.

The bodies are those of ``bench/run --only lifecycle-durable`` (batches of
``--batch`` items ``{"id": "...", "data": {"n": i}}``), into a queue with the
defaults (``{"id": "lc"}``, a Python target), with the collector tuned as ``hipq run``
tunes it (``settle_heap``). Each run empties ``jobs`` first, then:

- ``request``: the handler (``hipq.api.handlers.enqueue_batch``) called with a
  mocked request for every batch, one after another: JSON parse, item checks, jobs
  built, the INSERT (asyncpg) and the answer encoded. CPU of this process
  (``time.process_time``: the daemon's share; PostgreSQL's is not counted).
- the pieces without the database, each over the same bodies (the least of three
  passes): ``parse`` (the JSON of the body), ``items`` (the items checked:
  ``_batch_items``), ``build`` (the jobs built as ``enqueue_many`` builds them, body
  hash included) and ``values`` (the INSERT's statement and arguments, as the
  PostgreSQL store makes them).

Prints one JSON object: microseconds per job, the median of ``--runs`` runs (and
every run), on the event loop the daemon uses (``event_loop: auto``)::

    .venv/bin/python bench/enqueue_cost.py                       # its own server
    .venv/bin/python bench/enqueue_cost.py --database-url postgresql://...

Another version of hipq (a checkout of an older commit) is measured by the same
script with ``PYTHONPATH=<that checkout>``: the pieces fall back to what that
version has (``build_job`` per item, ``insert_jobs_call`` without packing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import asyncpg
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from common import drop_database, fresh_database, log, postgres

from hipq import service as service_module
from hipq.api import handlers
from hipq.api.deps import DEPS
from hipq.api.io import parse_json
from hipq.cli.context import loop_factory
from hipq.config import QueueConfig
from hipq.daemon import settle_heap
from hipq.service import Hipq
from hipq.store import open_store
from hipq.store.pgsql import insert_jobs_call

DB = "bench_enqueue_cost"


def bodies(jobs: int, size: int, prefix: str) -> list[bytes]:
    """bench/hipq_scenarios.py's batch_bodies: the same requests."""
    return [json.dumps({"jobs": [{"id": f"{prefix}-{i}", "data": {"n": i}}
                                 for i in range(start, min(start + size, jobs))]}).encode()
            for start in range(0, jobs, size)]


class _Payload:
    """The body of a mocked request (what ``request.read()`` reads)."""

    def __init__(self, body: bytes) -> None:
        self._body: bytes | None = body

    async def readany(self) -> bytes:
        body, self._body = self._body or b"", None
        return body

    def at_eof(self) -> bool:
        return self._body is None

    def set_read_chunk_size(self, size: int) -> None:
        pass


def _request(app: web.Application, queue: str, body: bytes) -> web.Request:
    return make_mocked_request(
        "POST", f"/v1/jobs/{queue}/batch", app=app, match_info={"queue": queue},
        headers={"Content-Type": "application/json", "Content-Length": str(len(body))},
        payload=_Payload(body))


def _builder(config: QueueConfig, now: Any) -> Callable[[str, Any, str, Any], Any]:
    """How enqueue_many builds the jobs of one batch (build_job in older versions)."""
    made = getattr(service_module, "JobBuilder", None)
    if made is not None:
        return made(config, now)  # type: ignore[no-any-return]
    return lambda i, r, token, trace: service_module.build_job(config, i, r, now, token=token,
                                                                trace=trace)


def _values(jobs: Any) -> Any:
    """The INSERT's statement and arguments, as the store makes them."""
    texts = getattr(jobs, "data_texts", None)
    try:
        return insert_jobs_call(jobs, guarded=False, data_texts=texts, packed=True)
    except TypeError:  # an older version: no data texts, no packing
        return insert_jobs_call(jobs, guarded=False)


def _cpu(fn: Callable[[], Any], repeat: int = 3) -> float:
    """The least CPU time of ``repeat`` calls (the others were disturbed)."""
    spent = []
    for _ in range(repeat):
        started = time.process_time()
        fn()
        spent.append(time.process_time() - started)
    return min(spent)


async def one_run(app: web.Application, service: Hipq, conn: asyncpg.Connection,
                  config: QueueConfig, sent: list[bytes], jobs: int) -> dict[str, float]:
    await conn.execute("TRUNCATE jobs")
    started = time.process_time()
    for body in sent:
        answer = await handlers.enqueue_batch(_request(app, config.id, body))
        assert answer.status == 200, answer.text
    request = time.process_time() - started
    rows = await conn.fetchval("SELECT count(*) FROM jobs")
    assert rows == jobs, rows
    parsed = [parse_json(body) for body in sent]
    items = [handlers._batch_items(p["jobs"]) for p in parsed]
    now = service.clock.now()

    def build() -> list[list[Any]]:
        out = []
        for batch in items:
            made = _builder(config, now)  # one per batch, as enqueue_many
            jobs = [made(i, r, "0" * 32, None) for i, r in batch]
            out.append(made.new_jobs(jobs) if hasattr(made, "new_jobs") else jobs)
        return out

    built = build()
    per_job = 1e6 / jobs
    return {
        "request": request * per_job,
        "parse": _cpu(lambda: [parse_json(body) for body in sent]) * per_job,
        "items": _cpu(lambda: [handlers._batch_items(p["jobs"]) for p in parsed]) * per_job,
        "build": _cpu(build) * per_job,
        "values": _cpu(lambda: [_values(b) for b in built]) * per_job,
    }


async def measure(server: str, args: argparse.Namespace) -> dict[str, Any]:
    url = await fresh_database(server, DB)
    store = await open_store(url)
    conn = await asyncpg.connect(url)
    try:
        await store.migrate()
        service = Hipq(store)
        config = QueueConfig.model_validate(
            {"id": "lc", "target": {"kind": "python", "function": "bench_targets:done"}})
        await service.create_queue(config)
        app = web.Application()
        app[DEPS] = SimpleNamespace(service=service)  # type: ignore[misc]
        sent = bodies(args.jobs, args.batch, "job")
        settle_heap()  # as `hipq run` does once started (gc thresholds)
        await one_run(app, service, conn, config, sent[:2], 2 * args.batch)  # warm-up
        runs = []
        for n in range(args.runs):
            runs.append(await one_run(app, service, conn, config, sent, args.jobs))
            log(f"run {n + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in runs[-1].items()))
    finally:
        await conn.close()
        await store.close()
        await drop_database(server, DB)
    medians = {k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]}
    return {"us_per_job": medians, "jobs": args.jobs, "batch": args.batch,
            "runs": [{k: round(v, 2) for k, v in r.items()} for r in runs]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--database-url", default=None)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=1_000)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--event-loop", choices=("auto", "uvloop", "asyncio"), default="auto")
    args = p.parse_args()
    with postgres(args.database_url) as server, asyncio.Runner(
            loop_factory=loop_factory(args.event_loop)) as runner:
        print(json.dumps(runner.run(measure(server, args))))


if __name__ == "__main__":
    main()

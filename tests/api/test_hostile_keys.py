"""Keys cannot be hijacked (docs/security.md, "Poison values and keys"; issue 13 findings 1 and 5),
black box against a real ``hipq run`` over sockets, on SQLite and PostgreSQL.

Generated keys live in a namespace producers cannot set (``~token.attempt``), and
a signed callback URL is bound to the job's token as well as its key and attempt.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.api.conftest import SIGNING_KEY, TOKENS, Api, Downstream, http_queue
from tests.api.subprocess_daemon import hipq_run_process

ROOT = Path(__file__).parents[2]
WITHIN = 10.0  # seconds a launch may take to show up (the loop ticks every 0.2 s)


@pytest.fixture
async def hipq_run(tmp_path: Path, db_url: str) -> AsyncIterator[str]:
    """A ``hipq run`` subprocess; yields its base URL. Its log is left in tmp_path."""
    config = {"database": {"url": db_url},
              "api": {"host": "127.0.0.1", "port": 0, "tokens": TOKENS},
              "reconcile": {"interval_seconds": 0.2}, "signing_key": SIGNING_KEY}
    async with hipq_run_process(tmp_path, config, clean_exit=False) as url:
        yield url


@pytest.fixture
async def api(hipq_run: str) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(hipq_run, session)


async def _launch_of(downstream: Downstream, job_id: str, attempt: int) -> dict[str, Any]:
    """The launch POST of ``job_id``'s try ``attempt`` (fails after WITHIN seconds)."""
    deadline = time.monotonic() + WITHIN
    while True:
        for body in downstream.received:
            if body["id"] == job_id and body["attempt"] == attempt:
                return body
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"try {attempt} of {job_id} was never launched"
        downstream.arrived.clear()
        try:
            await asyncio.wait_for(downstream.arrived.wait(), remaining)
        except TimeoutError:
            continue


async def test_a_producer_cannot_block_launches_with_a_stolen_key(
        api: Api, downstream: Downstream) -> None:
    for queue in ("victim", "attacker", "other"):
        status, body = await api.call("POST", "/v1/jobs", http_queue(queue, downstream.url))
        assert status == 201, body
    assert (await api.call("PUT", "/v1/jobs/victim/v", {}))[0] == 201
    first = await _launch_of(downstream, "v", 1)
    key = (await api.job("victim", "v"))["correlation_key"]
    assert key == first["correlation_key"]
    # guess the key of the next try and hold it with a far-future job
    token, _, number = key.rpartition(".")
    stolen = f"{token}.{int(number) + 1}" if number.isdigit() else f"{key}.2"
    status, body = await api.call("PUT", "/v1/jobs/attacker/a", {
        "correlation_key": stolen, "run_after": "2099-01-01T00:00:00Z"})
    assert status in {201, 422}, body  # refused, or accepted in a namespace of its own
    # the victim's try fails retryably: its retry must still launch
    status, body = await api.call("POST", first["callback_url"],
                                  {"status": "failed", "retryable": True}, token=None)
    assert status == 202, body
    await _launch_of(downstream, "v", 2)
    # and the daemon keeps launching other queues' jobs
    assert (await api.call("PUT", "/v1/jobs/other/o", {}))[0] == 201
    await _launch_of(downstream, "o", 1)
    assert (await api.job("other", "o"))["status"] == "running"


async def test_a_signed_callback_url_completes_one_try_of_one_job(
        api: Api, downstream: Downstream) -> None:
    template = {"request": "order-{data.order}"}
    for queue in ("first", "second"):
        status, body = await api.call("POST", "/v1/jobs", http_queue(
            queue, downstream.url, correlation=template))
        assert status == 201, body
    assert (await api.call("PUT", "/v1/jobs/first/a", {"data": {"order": 7}}))[0] == 201
    old = await _launch_of(downstream, "a", 1)
    status, _ = await api.call("POST", old["callback_url"], {"result": "a-done"}, token=None)
    assert status == 202
    assert (await api.wait_job("first", "a", "succeeded"))["result"] == "a-done"
    # a later job in another queue gets the same key and the same attempt number
    assert (await api.call("PUT", "/v1/jobs/second/b", {"data": {"order": 7}}))[0] == 201
    new = await _launch_of(downstream, "b", 1)
    assert new["correlation_key"] == old["correlation_key"]
    # whoever kept the old URL cannot complete the new job with it
    status, body = await api.call("POST", old["callback_url"], {"result": "forged"}, token=None)
    assert status in {401, 409}, body
    await asyncio.sleep(1.0)  # let a few ticks pass: a forged result would be applied by now
    job = await api.job("second", "b")
    assert job["status"] == "running", job
    # its own URL still works
    assert (await api.call("POST", new["callback_url"], {"result": "b-done"}, token=None))[0] == 202
    assert (await api.wait_job("second", "b", "succeeded"))["result"] == "b-done"

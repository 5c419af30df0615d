"""A real ``hipq run`` subprocess (API on a free port, SQLite and PostgreSQL)
against a real downstream on 127.0.0.1: the curl examples of docs/http-api.md run verbatim
(create a queue, enqueue, batch, the downstream's callback, get, cancel, replay,
archived listing, stats, live jobs, unmatched responses), then the same daemon serves
a ``sync`` queue whose first try fails with a 500 and is retried, and pages through
1,000 archived jobs."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.api.conftest import (
    ADMIN,
    SIGNING_KEY,
    TOKENS,
    Api,
    Downstream,
    archived_ids,
    expire_many,
    http_queue,
)
from tests.api.subprocess_daemon import hipq_run_process
from tests.api.test_flows import LAUNCH_KEYS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def readme_commands() -> list[str]:
    """The curl commands of docs/http-api.md (its first ``sh`` block), one string each."""
    section = (ROOT / "docs" / "http-api.md").read_text()
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    commands, current = [], []
    for line in block.group(1).splitlines():
        if line.startswith("#"):
            if current:
                commands.append("\n".join(current))
            current = []
        elif line.strip():
            current.append(line)
    commands.append("\n".join(current))
    return commands


@pytest.fixture
async def hipq_run(tmp_path: Path, db_url: str) -> AsyncIterator[str]:
    """A ``hipq run`` subprocess (on SQLite and on PostgreSQL); yields its base URL."""
    config = {"database": {"url": db_url},
              # stats fresh on every read: the last example checks them at once
              "api": {"host": "127.0.0.1", "port": 0, "tokens": TOKENS,
                      "stats_max_age_seconds": 0},
              "reconcile": {"interval_seconds": 0.5}, "signing_key": SIGNING_KEY}
    async with hipq_run_process(tmp_path, config) as url:
        yield url


async def _sh(command: str, env: dict[str, str]) -> str:
    proc = await asyncio.create_subprocess_exec(
        "bash", "-c", command, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, (command, out, err)
    return out.decode()


async def test_readme_curl_examples_and_sync_mode(hipq_run: str,
                                                  downstream: Downstream) -> None:
    env = dict(os.environ, HIPQ=hipq_run, TOKEN=ADMIN, DOWNSTREAM=downstream.url)
    outputs: list[Any] = []
    async with aiohttp.ClientSession() as session:
        api = Api(hipq_run, session)
        for command in readme_commands():
            if "$CALLBACK_URL" in command:
                launches = await downstream.wait_for(3)
                assert {tuple(sorted(x)) for x in launches} == {tuple(sorted(LAUNCH_KEYS))}
                env["CALLBACK_URL"] = next(x["callback_url"] for x in launches
                                           if x["id"] == "inv-1")
            outputs.append(json.loads(await _sh(command, env)))
            if "DELETE" in command:  # the archived listing needs inv-1 finished
                await api.wait_job("invoices", "inv-1", "succeeded")
        job = await api.wait_job("invoices", "inv-1", "succeeded")
        assert job["result"] == {"pdf": "inv-1.pdf"}
        assert outputs[0]["id"] == "invoices"
        assert outputs[1]["status"] == "queued"
        assert [j["status"] for j in outputs[2]["jobs"]] == ["created", "created"]
        assert outputs[3]["accepted"] is True
        assert outputs[4]["history"] is not None
        assert outputs[5]["id"] == "inv-3"
        assert outputs[6]["replay_of"] == "inv-1"
        assert "inv-1" in [j["id"] for j in outputs[7]["jobs"]]
        assert outputs[8]["responses"]["applied"] >= 1
        assert {j["status"] for j in outputs[9]["jobs"]} <= {"running"}
        assert outputs[10] == {"responses": [], "next_cursor": None}

        calls = 0

        async def reply(body: dict[str, Any]) -> tuple[int, Any]:
            nonlocal calls
            calls += body["queue"] == "sync"
            return (500, "oops") if body["attempt"] == 1 else (200, {"n": body["data"]["n"]})

        downstream.reply = reply
        status, _ = await api.call("POST", "/v1/jobs", http_queue(
            "sync", downstream.url, target={"mode": "sync"}))
        assert status == 201
        await api.call("PUT", "/v1/jobs/sync/s1", {"data": {"n": 5}})
        job = await api.wait_job("sync", "s1", "succeeded")
        assert job["result"] == {"n": 5}
        assert job["attempt"] == 2
        assert calls == 2

        # archived listing through the real daemon: 1,000 jobs, no gaps, no repeats
        await api.call("POST", "/v1/jobs", {"id": "arch"})
        await expire_many(api, "arch", 1000)
        seen = await archived_ids(api, "name=arch&limit=97")
        assert len(seen) == 1000
        assert set(seen) == {f"j{i:04d}" for i in range(1000)}

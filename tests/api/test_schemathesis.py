"""The whole API against its own ``/openapi.json`` with schemathesis' full check set
(``--checks all``: server errors, documented statuses, content types, headers and
schemas, schema-valid requests accepted, schema-violating ones refused, missing
required headers, unsupported methods answered 405 with ``Allow``, auth not
ignored...), run by the schemathesis CLI as in docs/http-api.md, with an admin token,
a fixed seed and a bounded number of examples. It must find nothing.

The API runs in a thread of its own, on SQLite and on PostgreSQL, without a reconcile
loop: generated queues and jobs are stored and read back but never launched anywhere.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hipq.api import ApiDeps, ApiServer
from hipq.config import ApiConfig, TokenConfig
from hipq.responses.signing import Signer
from hipq.service import Hipq
from hipq.store import open_store
from tests.api.conftest import ADMIN

pytestmark = pytest.mark.slow  # the schemathesis CLI against a daemon, about 40 s
EXAMPLES = 12  # per operation and phase: about 1,000 requests in all
SEED = 27
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
CONFIG = Path(__file__).with_name("schemathesis.toml")  # the known gaps, each explained

class ApiThread:
    """The API on 127.0.0.1 (free port) in a thread with its own event loop."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.port = 0
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self.error = exc
            self.ready.set()

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        store = await open_store(self.db_url)
        config = ApiConfig(port=0, tokens=[TokenConfig(token=ADMIN, role="admin")],
                           stats_max_age_seconds=0)  # counts read back at once
        server = ApiServer(ApiDeps(service=Hipq(store), config=config, signer=Signer("k")))
        self.port = await server.start()
        self.ready.set()
        await self._stop.wait()
        await server.stop()
        await store.close()

    def __enter__(self) -> ApiThread:
        self._thread.start()
        assert self.ready.wait(30), "the API did not start"
        if self.error is not None:
            raise self.error
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture
def api_url(db_url: str) -> Iterator[str]:
    with ApiThread(db_url) as api:
        yield f"http://127.0.0.1:{api.port}"


def schemathesis_command(api_url: str, token: str) -> list[str]:
    """The run docs/http-api.md shows, bounded for the suite."""
    return [str(SCHEMATHESIS), "--config-file", str(CONFIG), "run",
            f"{api_url}/openapi.json", "--checks", "all",
            "-H", f"Authorization: Bearer {token}", "--seed", str(SEED),
            "--max-examples", str(EXAMPLES), "--workers", "1", "--no-color"]



@pytest.mark.timeout(300)
def test_api_conforms_to_its_openapi_document(api_url: str, tmp_path: Path) -> None:
    run = subprocess.run(schemathesis_command(api_url, ADMIN), cwd=tmp_path,
                         capture_output=True, text=True, timeout=280, check=False)
    report = run.stdout[-20000:] + run.stderr[-5000:]
    assert run.returncode == 0, report

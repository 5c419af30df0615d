"""Property-based check of the whole API against its own ``/openapi.json``: with a
valid token and a bounded number of examples per operation, no answer is a 5xx and
every answer matches the documented status codes, content types and schemas.

The API runs in a thread of its own (schemathesis calls it synchronously with
``requests``), on SQLite and on PostgreSQL, without a reconcile loop: generated queues and jobs are
stored and read back but never launched anywhere.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, given
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from hipq.api import ApiDeps, ApiServer
from hipq.config import ApiConfig, TokenConfig
from hipq.responses.signing import Signer
from hipq.service import Hipq
from hipq.store import open_store
from tests.api.conftest import ADMIN

EXAMPLES = 20
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


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


def test_api_conforms_to_its_openapi_document(api_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    failures: list[str] = []
    headers = {"Authorization": f"Bearer {ADMIN}"}
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None,
                             suppress_health_check=list(HealthCheck), derandomize=True)
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(base_url=api_url, headers=headers, checks=CHECKS)

        try:
            check()
        except Exception as exc:
            failures.append(f"{operation.label}: {exc}"[:3000])
    assert not failures, "\n\n".join(failures)

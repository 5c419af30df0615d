"""Kafka test helpers: a responder (the downstream service on Kafka), an in-process
daemon, fresh topic/group names, and bounded polling.

The broker is the session's Tansu (``kafka_bootstrap``), shared by every test and
never forgetting anything, so each test uses its own random topics and groups.
Consumers use ``session_timeout_ms=2000, heartbeat_interval_ms=200`` (Tansu waits
half the session timeout at every join).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from hipq.config import Settings
from hipq.daemon import Daemon
from hipq.jobs import Attempt, Job
from hipq.responses.kafka_consumer import rewind_truncated
from hipq.service import Hipq
from hipq.store import Store
from hipq.store import schema as s

log = logging.getLogger(__name__)

SESSION = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 200}
PARTITIONS = 4


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def wait_until(predicate: Callable[[], Awaitable[bool]], *, within: float,
                     what: str, interval: float = 0.05) -> None:
    """Poll ``predicate`` until it holds; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out after {within}s waiting for {what}"
        await asyncio.sleep(interval)


async def create_topics(bootstrap: str, *topics: str, partitions: int = PARTITIONS) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
    finally:
        await admin.close()


def kafka_settings(db_url: str, bootstrap: str, *, group: str, response_topics: Sequence[str],
                   queues: Sequence[dict[str, Any]], api: bool = False,
                   buffer_seconds: float = 3600.0, lease_seconds: float = 30.0,
                   **kafka: Any) -> Settings:
    return Settings.model_validate({
        "database": {"url": db_url},
        "api": {"enabled": api, "port": 0},
        "reconcile": {"interval_seconds": 0.2, "lease_seconds": lease_seconds},
        "responses": {"buffer_seconds": buffer_seconds},
        "kafka": {"bootstrap_servers": bootstrap, "group_id": group,
                  "response_topics": list(response_topics), "reconnect_backoff_seconds": 0.2,
                  "reconnect_backoff_max_seconds": 1.0, **SESSION, **kafka},
        "queues": list(queues),
    })


@asynccontextmanager
async def running_daemon(settings: Settings, **options: Any) -> AsyncIterator[Daemon]:
    daemon = Daemon(settings, **options)
    await daemon.open()
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(daemon.run(stop=stop, ready=ready))
    await asyncio.wait_for(ready.wait(), 15)
    try:
        yield daemon
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


async def consumer_joined(daemon: Daemon, within: float = 20.0) -> None:
    consumer = daemon.kafka_consumer
    assert consumer is not None
    await asyncio.wait_for(consumer.assigned.wait(), within)


# -- the downstream service ---------------------------------------------------------


@dataclass
class Request:
    """A launch as the downstream sees it."""

    value: dict[str, Any]
    key: str | None
    headers: dict[str, str]
    partition: int

    @property
    def data(self) -> dict[str, Any]:
        return dict(self.value["data"])

    @property
    def attempt(self) -> int:
        return int(self.value["attempt"])


@dataclass
class Reply:
    value: Any  # a dict (sent as JSON), bytes (sent as is) or None
    key: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


Policy = Callable[[Request], Sequence[Reply]]


class Responder:
    """Consumes the request topic in its own group and answers each request with the
    replies its policy returns. The replies of one poll are shuffled (out of order)
    and spread over random partitions of the response topic."""

    def __init__(self, bootstrap: str, request_topic: str, response_topic: str,
                 policy: Policy, *, seed: int = 7) -> None:
        self.bootstrap = bootstrap
        self.request_topic = request_topic
        self.response_topic = response_topic
        self.policy = policy
        self.requests: list[Request] = []
        self.sent = 0
        self.errors: list[str] = []
        self._random = random.Random(seed)
        self._producer: AIOKafkaProducer | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all",
                                          linger_ms=2, request_timeout_ms=5000)
        await self._producer.start()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.wait_for(self._task, 30)
        if self._producer is not None:
            await self._producer.stop()

    async def send(self, reply: Reply) -> None:
        assert self._producer is not None
        if isinstance(reply.value, bytes) or reply.value is None:
            value = reply.value
        else:
            value = json.dumps(reply.value).encode()
        await self._producer.send_and_wait(
            self.response_topic, value=value,
            key=None if reply.key is None else reply.key.encode(),
            headers=[(k, v.encode()) for k, v in reply.headers.items()],
            partition=self._random.randrange(PARTITIONS))
        self.sent += 1

    async def _run(self) -> None:
        consumer = AIOKafkaConsumer(self.request_topic, bootstrap_servers=self.bootstrap,
                                    group_id=name("responder"), auto_offset_reset="earliest",
                                    enable_auto_commit=False, **SESSION)
        await consumer.start()
        try:
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                if not batches:
                    await rewind_truncated(consumer)
                replies: list[Reply] = []
                for records in batches.values():
                    for record in records:
                        request = Request(
                            value=json.loads(record.value),
                            key=None if record.key is None else record.key.decode(),
                            headers={k: v.decode() for k, v in record.headers},
                            partition=record.partition)
                        self.requests.append(request)
                        replies.extend(self.policy(request))
                self._random.shuffle(replies)
                for reply in replies:
                    try:
                        await self.send(reply)
                    except Exception as exc:  # the broker may be down: the reply is lost
                        self.errors.append(repr(exc))
        finally:
            await consumer.stop()

    def seen(self, job_id: str) -> list[Request]:
        return [r for r in self.requests if r.value["id"] == job_id]


@asynccontextmanager
async def responder(bootstrap: str, request_topic: str, response_topic: str,
                    policy: Policy) -> AsyncIterator[Responder]:
    r = Responder(bootstrap, request_topic, response_topic, policy)
    await r.start()
    try:
        yield r
    finally:
        await r.stop()


# -- reading the database ----------------------------------------------------------------


async def job_and_history(service: Hipq, queue: str, job_id: str) -> tuple[Job, list[Attempt]]:
    return await service.get_job(queue, job_id)


async def all_terminal(store: Store) -> bool:
    async with store.engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(s.jobs)))
                   .scalar_one()) == 0


async def inbox_rows(store: Store, key: str | None = None) -> list[Any]:
    t = s.response_inbox
    query = sa.select(t).order_by(t.c.id)
    if key is not None:
        query = query.where(t.c.correlation_key == key)
    async with store.engine.connect() as conn:
        return list(await conn.execute(query))


@contextlib.contextmanager
def captured(logger: str) -> Any:
    """Records of ``logger`` (and its children) while the block runs."""
    records: list[logging.LogRecord] = []

    class _Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = _Handler(level=logging.DEBUG)
    target = logging.getLogger(logger)
    old_level = target.level
    target.addHandler(handler)
    target.setLevel(logging.INFO)
    try:
        yield records
    finally:
        target.removeHandler(handler)
        target.setLevel(old_level)


# -- a broker of the test's own ------------------------------------------------------------

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnBroker:
    """A Tansu instance on a fixed port that the test may stop and start again
    (``scripts/kafka-ephemeral`` with ``KAFKA_EPHEMERAL_PORT`` and a unique name)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._env = dict(os.environ, KAFKA_EPHEMERAL_NAME=name("hipq-kafka-test"),
                         KAFKA_EPHEMERAL_PORT=str(self.port), PYTHON=sys.executable)

    def _run(self, command: str) -> None:
        subprocess.run([str(SCRIPTS / "kafka-ephemeral"), command], env=self._env, check=True,
                       capture_output=True, timeout=60)

    async def start(self) -> None:
        await asyncio.to_thread(self._run, "start")

    async def stop(self) -> None:
        await asyncio.to_thread(self._run, "stop")

"""The producer and the response parser on their own."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from hipq.config import CorrelationConfig, KafkaConfig, KafkaResponseFields
from hipq.config import KafkaTarget as KafkaTargetConfig
from hipq.errors import LaunchError, TransientLaunchError
from hipq.jobs import Job, JobState
from hipq.responses.kafka_consumer import MalformedMessage, ResponseParser, _fast_fields
from hipq.targets.kafka_target import KafkaProducer, KafkaTarget
from tests.kafka.conftest import name

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(("mode", "idempotent"), [("auto", False), (False, False)])
async def test_producer_works_without_broker_idempotence(kafka_bootstrap: str, mode: Any,
                                                         idempotent: bool) -> None:
    producer = KafkaProducer(KafkaConfig(bootstrap_servers=kafka_bootstrap, idempotence=mode))
    try:
        await producer.send(name("t"), key=b"k", value=b"{}")
        await producer.send(name("t"), key=None, value=b"{}")
        assert producer.idempotent is idempotent
    finally:
        await producer.close()


async def test_required_idempotence_fails_launches_as_retryable(kafka_bootstrap: str) -> None:
    producer = KafkaProducer(KafkaConfig(bootstrap_servers=kafka_bootstrap, idempotence=True,
                                         reconnect_backoff_seconds=30))
    try:
        with pytest.raises(TransientLaunchError) as caught:
            await producer.send(name("t"), key=b"k", value=b"{}")
        assert caught.value.kind == "transport"
        assert caught.value.retryable
        assert producer.idempotent is None
        assert not producer.running
    finally:
        await producer.close()


async def test_broker_down_fails_fast_and_backs_off() -> None:
    port = _free_port()
    config = KafkaConfig(bootstrap_servers=f"127.0.0.1:{port}", reconnect_backoff_seconds=30,
                         delivery_timeout_seconds=2)
    producer = KafkaProducer(config)
    try:
        with pytest.raises(TransientLaunchError, match="Kafka is unavailable"):
            await producer.send("t", key=b"k", value=b"{}")
        assert producer.failed_starts == 1
        started = time.monotonic()
        with pytest.raises(TransientLaunchError, match="next connection attempt"):
            await producer.send("t", key=b"k", value=b"{}")
        assert time.monotonic() - started < 0.5  # no connection attempt inside the back-off
        assert producer.failed_starts == 1
    finally:
        await producer.close()


def _job(**fields: Any) -> Job:
    base: dict[str, Any] = {"id": "j1", "queue": "q", "data": {"customer": "c7"},
                            "status": JobState.RUNNING, "attempt": 2, "max_attempts": 3,
                            "correlation_key": "tok.2", "run_at": NOW, "created_at": NOW,
                            "updated_at": NOW}
    return Job(**{**base, **fields})


@dataclass
class _Sent:
    calls: list[dict[str, Any]] = field(default_factory=list)

    async def send(self, topic: str, **message: Any) -> None:
        self.calls.append({"topic": topic, **message})

    async def dispatch(self, topic: str, **message: Any) -> asyncio.Future[None]:
        await self.send(topic, **message)
        acked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        acked.set_result(None)
        return acked


async def test_target_message_and_key_template() -> None:
    sent = _Sent()
    target = KafkaTarget(KafkaTargetConfig(kind="kafka", topic="req", key="{data.customer}"),
                         sent)  # type: ignore[arg-type]
    await target.launch(_job())
    (call,) = sent.calls
    assert (call["topic"], call["key"]) == ("req", b"c7")
    assert json.loads(call["value"]) == {
        "id": "j1", "queue": "q", "data": {"customer": "c7"}, "attempt": 2,
        "max_attempts": 3, "correlation_key": "tok.2", "callback_url": None}
    assert dict(call["headers"])["Hipq-Correlation-Key"] == b"tok.2"
    with pytest.raises(LaunchError) as caught:
        await target.launch(_job(data={}))
    assert not caught.value.retryable


async def test_target_without_producer_is_a_retryable_failure() -> None:
    target = KafkaTarget(KafkaTargetConfig(kind="kafka", topic="req"), None)
    with pytest.raises(TransientLaunchError):
        await target.launch(_job())


# -- the response parser ---------------------------------------------------------------


@dataclass
class _Record:
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    topic: str = "resp"
    partition: int = 2
    offset: int = 41
    timestamp: int = 1700000000000


ORDERS = CorrelationConfig(request="{data.id}", response="{value.order.id}")
OTHER = CorrelationConfig(request="{data.ref}", response="{headers.ref}")


def _parser(**fields: str) -> ResponseParser:
    return ResponseParser(KafkaResponseFields(**fields), {"orders": ORDERS, "other": OTHER})


def test_header_beats_template_beats_message_key() -> None:
    body = json.dumps({"order": {"id": "o1"}}).encode()
    parser = _parser()
    assert parser.parse(_Record(body, b"mk", [("Hipq-Correlation-Key", b"h1")])
                        ).correlation_key == "h1"
    assert parser.parse(_Record(body, b"mk")).correlation_key == "o1"
    assert parser.parse(_Record(b"{}", b"mk")).correlation_key == "mk"
    assert parser.parse(_Record(b"{}", None, [("ref", b"r9")])).correlation_key == "r9"
    # a Hipq-Queue header limits the templates to that queue's
    assert parser.parse(_Record(body, b"mk", [("Hipq-Queue", b"other")])
                        ).correlation_key == "mk"


def test_fields_dedup_key_and_attempt_header() -> None:
    parser = _parser(status="outcome.state", result="payload")
    body = {"order": {"id": "o1"}, "outcome": {"state": "failed"}, "payload": [1],
            "retryable": False, "error": {"detail": "x"}}
    response = parser.parse(_Record(json.dumps(body).encode(), None,
                                    [("Hipq-Attempt", b"3")]))
    assert (response.status, response.result, response.retryable, response.attempt,
            response.error, response.source) == ("failed", [1], False, 3, {"detail": "x"},
                                                 "kafka")
    assert response.dedup_key == "kafka:resp:2:41:1700000000000"
    heartbeat = _parser().parse(_Record(b'{"status": "running", "extend_seconds": 60}', b"k"))
    assert (heartbeat.status, heartbeat.extend_seconds) == ("running", 60)


@pytest.mark.parametrize("record", [
    _Record(None, b"k"), _Record(b"\xff\xfe", b"k"), _Record(b"42", b"k"),
    _Record(b"{}"), _Record(b'{"status": "done"}', b"k"), _Record(b'{"attempt": 0}', b"k"),
])
def test_malformed(record: _Record) -> None:
    with pytest.raises(MalformedMessage):
        _parser().parse(record)


@pytest.mark.parametrize(("value", "headers"), [
    ({}, {}), ({"status": "succeeded"}, {}), ({"status": "failed", "retryable": False,
                                              "error": {"code": "x"}}, {}),
    ({"result": [1, {"a": None}], "attempt": 2, "orderId": "o1", "version": 3}, {}),
    ({"status": "succeeded"}, {"Hipq-Attempt": "4"}),
    ({"status": "succeeded", "attempt": 1}, {"Hipq-Attempt": "4"}),
    # shapes left to pydantic: the fast path answers None for them
    ({"status": "running", "extend_seconds": 5}, {}), ({"attempt": "2"}, {}),
    ({"attempt": True}, {}), ({"retryable": "yes"}, {}), ({"status": "done"}, {}),
    ({"status": "succeeded"}, {"Hipq-Attempt": "04"}), ({"attempt": 0}, {}),
])
def test_fast_path_reads_what_pydantic_reads(value: dict[str, Any],
                                             headers: dict[str, str]) -> None:
    fields = KafkaResponseFields()
    fast = _fast_fields(value, headers, fields)
    try:
        slow = ResponseParser(fields)._fields(value, headers)
    except MalformedMessage:
        assert fast is None
        return
    if fast is not None:
        assert tuple(fast) == (slow.status, slow.attempt, slow.retryable, slow.result,
                               slow.error, slow.extend_seconds)
    elif value.get("status", "succeeded") in ("succeeded", "failed") and not (
            set(value) & {"extend_seconds", "attempt", "retryable"}) and not headers:
        raise AssertionError(f"the usual shape {value} missed the fast path")
    assert _fast_fields(value, headers, KafkaResponseFields(status="state")) is None


async def test_dispatch_pipelines_sends_within_max_in_flight(kafka_bootstrap: str) -> None:
    producer = KafkaProducer(KafkaConfig(bootstrap_servers=kafka_bootstrap, idempotence=False,
                                         max_in_flight=8))
    topic = name("pipe")
    try:
        acks = [await producer.dispatch(topic, key=b"k", value=b"{}") for _ in range(8)]
        ninth = asyncio.create_task(producer.dispatch(topic, key=b"k", value=b"{}"))
        await asyncio.gather(*acks)  # no slot until an acknowledgement arrived
        await (await asyncio.wait_for(ninth, 10))
        assert all(ack.done() and ack.exception() is None for ack in acks)
        assert producer._slots.free == 8  # every slot given back
    finally:
        await producer.close()

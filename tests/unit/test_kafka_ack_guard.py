"""The Kafka producer's acknowledgement guard (issue 28: one timer for every message
in flight, not one each): a message the broker never acknowledges fails as a
``timeout`` try after the delivery timeout (and a grace) and gives its slot back;
acknowledged ones are forgotten, even behind one that still waits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hipq.config import KafkaConfig
from hipq.errors import TransientLaunchError
from hipq.jobs import ErrorKind
from hipq.targets import kafka_target
from hipq.targets.kafka_target import KafkaProducer


class _Aio:
    """An aiokafka producer stand-in: each send's acknowledgement is the test's."""

    def __init__(self) -> None:
        self.acks: list[asyncio.Future[None]] = []

    async def send(self, topic: str, **_: Any) -> asyncio.Future[None]:
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.acks.append(ack)
        return ack


def _producer(monkeypatch: pytest.MonkeyPatch, max_in_flight: int = 8) -> tuple[KafkaProducer,
                                                                                  _Aio]:
    monkeypatch.setattr(kafka_target, "ACK_GRACE_SECONDS", 0.0)
    producer = KafkaProducer(KafkaConfig(bootstrap_servers="127.0.0.1:1",
                                         delivery_timeout_seconds=0.05,
                                         max_in_flight=max_in_flight))
    aio = _Aio()
    producer._producer = aio  # started
    return producer, aio


async def test_unacknowledged_messages_time_out_and_give_their_slots_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    producer, aio = _producer(monkeypatch)
    done = [await producer.dispatch("t", key=b"k", value=b"{}") for _ in range(3)]
    aio.acks[1].set_result(None)
    await asyncio.sleep(0)
    assert done[1].done()
    assert done[1].exception() is None
    later = await producer.dispatch("t", key=b"k", value=b"{}")  # its own deadline
    await asyncio.wait_for(asyncio.gather(*done, return_exceptions=True), 2)
    for future in (done[0], done[2]):
        error = future.exception()
        assert isinstance(error, TransientLaunchError)
        assert error.kind == ErrorKind.TIMEOUT
    assert not later.done() or isinstance(later.exception(), TransientLaunchError)
    await asyncio.wait_for(asyncio.gather(later, return_exceptions=True), 2)
    aio.acks[0].set_result(None)  # an acknowledgement after the timeout changes nothing
    await asyncio.sleep(0)
    assert producer._slots.free == 8  # every slot back, once
    assert not producer._guards
    await producer.close()


async def test_acknowledged_messages_are_forgotten_behind_one_that_waits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    producer, aio = _producer(monkeypatch, max_in_flight=4)
    producer.config = producer.config.model_copy(update={"delivery_timeout_seconds": 30})
    stuck = await producer.dispatch("t", key=b"k", value=b"{}")
    for _ in range(100):
        await producer.dispatch("t", key=b"k", value=b"{}")
        aio.acks[-1].set_result(None)
        await asyncio.sleep(0)
    assert len(producer._guards) <= 2 * 4 + 1  # not one per message sent
    assert not stuck.done()
    await producer.close()
    aio.acks[0].cancel()
    await asyncio.sleep(0)
    assert isinstance(stuck.exception(), TransientLaunchError)

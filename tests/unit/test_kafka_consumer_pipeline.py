"""The Kafka response consumer's pipeline (issue 28): the next batch is polled and
parsed while the previous one is written to the inbox. Whatever the order of polls,
writes and a write that fails (the database down for a moment), every message reaches
the inbox, and offsets are committed only past what was written, in order. Runs
against a stand-in for aiokafka's consumer and for the store (no broker)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiokafka import TopicPartition

from hipq.config import KafkaConfig
from hipq.errors import TransientStoreError
from hipq.responses.kafka_consumer import KafkaResponseConsumer
from hipq.store import InboxRow, Response

TOPIC = "responses"
PER_PARTITION = 30


@dataclass(frozen=True)
class _Record:
    topic: str
    partition: int
    offset: int
    timestamp: int = 1
    key: bytes | None = None
    value: bytes = b'{"status": "succeeded"}'

    @property
    def headers(self) -> list[tuple[str, bytes]]:
        return [("Hipq-Correlation-Key", f"k-{self.partition}-{self.offset}".encode())]


class _Consumer:
    """Two partitions of PER_PARTITION messages; a poll takes up to ``max_records``,
    half from each partition."""

    def __init__(self) -> None:
        self.tps = [TopicPartition(TOPIC, p) for p in (0, 1)]
        self.positions = dict.fromkeys(self.tps, 0)
        self.commits: list[dict[TopicPartition, int]] = []

    def assignment(self) -> set[TopicPartition]:
        return set(self.tps)

    async def getmany(self, *, timeout_ms: int, max_records: int) -> dict[Any, list[_Record]]:
        await asyncio.sleep(0)  # (a write that fails at once rewinds before this poll)
        out: dict[Any, list[_Record]] = {}
        for tp in self.tps:
            start = self.positions[tp]
            end = min(start + max_records // 2, PER_PARTITION)
            if end > start:
                out[tp] = [_Record(TOPIC, tp.partition, o) for o in range(start, end)]
                self.positions[tp] = end
        if not out:
            await asyncio.sleep(timeout_ms / 1000)
        return out

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.commits.append(dict(offsets))

    def highwater(self, tp: TopicPartition) -> int:
        return PER_PARTITION

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]


class _Store:
    """An inbox by dedup key; the writes numbered in ``failing`` fail as if the
    database were down; each write takes a moment (the next poll comes meanwhile)."""

    def __init__(self, failing: set[int]) -> None:
        self.failing = failing
        self.writes = 0
        self.inbox: dict[str, Response] = {}

    async def queue_list(self) -> list[Any]:
        return []

    async def inbox_insert_many(self, responses: list[Response], *,
                                now: datetime) -> list[int | None]:
        self.writes += 1
        if self.writes in self.failing:  # at once: before the next poll
            raise TransientStoreError("the database is down")
        await asyncio.sleep(0.002)
        ids: list[int | None] = []
        for response in responses:
            assert response.dedup_key is not None
            ids.append(None if response.dedup_key in self.inbox else len(self.inbox) + 1)
            self.inbox.setdefault(response.dedup_key, response)
        return ids


class _Written:
    """An engine that keeps the inbox rows it is told were written."""

    def __init__(self, rows: list[InboxRow]) -> None:
        self.responses_written = rows.extend

    def work_arrived(self) -> None:
        pass


async def _consume_all(failing: set[int], written: list[InboxRow] | None = None
                       ) -> tuple[_Store, _Consumer]:
    store, fake = _Store(failing), _Consumer()
    config = KafkaConfig(bootstrap_servers="127.0.0.1:1", response_topics=[TOPIC],
                         max_poll_records=10, reconnect_backoff_seconds=0.001)
    consumer = KafkaResponseConsumer(  # type: ignore[arg-type]
        config, store, engine=None if written is None else _Written(written))
    task = asyncio.create_task(consumer._consume(fake))  # type: ignore[arg-type]
    for _ in range(2000):
        if len(store.inbox) == 2 * PER_PARTITION and fake.commits and all(
                fake.commits[-1].get(tp) == PER_PARTITION for tp in fake.tps):
            break
        await asyncio.sleep(0.001)
    consumer._stopping.set()
    await asyncio.wait_for(task, 5)
    await consumer._commit_settled()
    return store, fake


def _committed_in_order(fake: _Consumer) -> bool:
    last = dict.fromkeys(fake.tps, 0)
    for offsets in fake.commits:
        for tp, offset in offsets.items():
            if offset < last[tp]:
                return False
            last[tp] = offset
    return True


async def test_every_message_is_written_once_and_committed_in_order() -> None:
    store, fake = await _consume_all(failing=set())
    assert sorted(store.inbox) == sorted(f"kafka:{TOPIC}:{p}:{o}:1" for p in (0, 1)
                                         for o in range(PER_PARTITION))
    assert _committed_in_order(fake)
    assert fake.commits[-1] == dict.fromkeys(fake.tps, PER_PARTITION)


async def test_a_failed_write_behind_a_parsed_batch_loses_nothing() -> None:
    # the second write fails (and rewinds) before the third batch, of the same
    # partitions, is polled; that batch is read again from the second one's start
    store, fake = await _consume_all(failing={2, 5})
    assert sorted(store.inbox) == sorted(f"kafka:{TOPIC}:{p}:{o}:1" for p in (0, 1)
                                         for o in range(PER_PARTITION))
    assert _committed_in_order(fake)
    assert fake.commits[-1] == dict.fromkeys(fake.tps, PER_PARTITION)


async def test_the_rows_written_are_handed_over_once_each() -> None:
    # (issue 28) the daemon applies them without reading them back: each message's
    # row once, with the id the store gave it, duplicates (rewound batches) not at all
    written: list[InboxRow] = []
    store, _ = await _consume_all(failing={2, 5}, written=written)
    ids = {key: i for i, key in enumerate(store.inbox, start=1)}
    assert sorted((r.id, r.correlation_key) for r in written) == sorted(
        (ids[f"kafka:{TOPIC}:{p}:{o}:1"], f"k-{p}-{o}") for p in (0, 1)
        for o in range(PER_PARTITION))
    assert {(r.source, r.status) for r in written} == {("kafka", "succeeded")}

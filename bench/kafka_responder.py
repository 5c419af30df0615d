"""The Kafka counterpart of bench/run's ``kafka`` and ``kafka-header`` phases, in its own
process: consumes launches from the request topic and answers each on the response
topic, until terminated.

    python bench/kafka_responder.py --bootstrap HOST:PORT --requests T --responses T
                                    [--header] [--hand-written]

By default it is ``hipq.downstream.KafkaResponder`` with a handler that returns the
launch's ``orderId`` and ``version``: the response value is ``{"status":
"succeeded", "attempt": N, "result": {"orderId", "version"}}``; without ``--header``
it carries no correlation header and the queue matches it by the template
``{value.result.orderId}:{value.result.version}`` (:data:`KIT_TEMPLATE`); with
``--header`` it carries the launch's ``Hipq-Correlation-Key`` header.

``--hand-written`` is the aiokafka loop the kit replaced, kept to compare the two:
without ``--header`` its value is ``{"orderId", "version", "status": "succeeded"}``,
matched by ``{value.orderId}:{value.version}`` (:data:`HAND_TEMPLATE`); with it,
``{"status": "succeeded"}`` and the header. Both commit offsets after the batch's
responses are acknowledged. Prints ``READY`` once the consumer has started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from hipq.downstream import KafkaResponder, Launch

HEADER = "Hipq-Correlation-Key"
KIT_TEMPLATE = "{value.result.orderId}:{value.result.version}"
HAND_TEMPLATE = "{value.orderId}:{value.version}"


async def respond_with_kit(args: argparse.Namespace) -> None:
    async def handle(launch: Launch) -> dict[str, Any]:
        return {"orderId": launch.data["orderId"], "version": launch.data["version"]}

    kit = KafkaResponder(args.bootstrap, args.requests, args.responses, handle,
                         group_id=f"bench-responder-{uuid.uuid4().hex[:8]}",
                         consumer_options={"session_timeout_ms": 6000,
                                           "heartbeat_interval_ms": 500,
                                           "max_partition_fetch_bytes": 4 * 2**20},
                         producer_options={"max_batch_size": 256 * 1024},
                         correlation_header=args.header)
    ready = asyncio.Event()
    running = asyncio.create_task(kit.run(ready=ready))
    await ready.wait()
    print("READY", flush=True)
    await running


async def respond(args: argparse.Namespace) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, acks="all", linger_ms=5,
                                max_batch_size=256 * 1024)
    consumer = AIOKafkaConsumer(args.requests, bootstrap_servers=args.bootstrap,
                                group_id=f"bench-responder-{uuid.uuid4().hex[:8]}",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                session_timeout_ms=6000, heartbeat_interval_ms=500,
                                max_partition_fetch_bytes=4 * 2**20)
    await producer.start()
    await consumer.start()
    while not consumer.assignment():
        await consumer.getmany(timeout_ms=100)
    print("READY", flush=True)
    ok = b'{"status":"succeeded"}'
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=200, max_records=5000)
            acks = []
            for records in batches.values():
                for record in records:
                    if args.header:
                        key = dict(record.headers)[HEADER]
                        acks.append(await producer.send(args.responses, value=ok,
                                                        headers=[(HEADER, key)]))
                    else:
                        data = json.loads(record.value)["data"]
                        value = json.dumps({"orderId": data["orderId"],
                                            "version": data["version"],
                                            "status": "succeeded"}).encode()
                        acks.append(await producer.send(args.responses, value=value))
            if acks:
                await asyncio.gather(*acks)
                await consumer.commit({tp: rs[-1].offset + 1 for tp, rs in batches.items()})
    finally:
        await consumer.stop()
        await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--requests", required=True)
    parser.add_argument("--responses", required=True)
    parser.add_argument("--header", action="store_true")
    parser.add_argument("--hand-written", action="store_true",
                        help="the aiokafka loop instead of hipq.downstream.KafkaResponder")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(respond(args) if args.hand_written else respond_with_kit(args))


if __name__ == "__main__":
    main()

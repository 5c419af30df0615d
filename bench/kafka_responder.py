"""The Kafka counterpart of bench/run's ``kafka`` and ``kafka-header`` phases, in its own
process: consumes launches from the request topic and answers each on the response
topic, until terminated.

    python bench/kafka_responder.py --bootstrap HOST:PORT --requests T --responses T
                                    [--header]

Without ``--header`` a response carries no correlation header: its JSON value is
``{"orderId", "version", "status": "succeeded"}`` (the launch's ``data``), matched by
the queue's ``correlation.response`` template ``{value.orderId}:{value.version}``.
With ``--header`` the response is ``{"status": "succeeded"}`` with the launch's
``Hipq-Correlation-Key`` header. Offsets are committed after the batch's responses are
acknowledged. Prints ``READY`` once the consumer has its partitions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

HEADER = "Hipq-Correlation-Key"


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
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(respond(args))


if __name__ == "__main__":
    main()

"""A producer: create a queue whose jobs go to a downstream, enqueue, wait, print.

    HIPQ_TOKEN=... python examples/producer.py http://127.0.0.1:8080 --http http://127.0.0.1:9000
    HIPQ_TOKEN=... python examples/producer.py http://127.0.0.1:8080 --kafka greetings-requests
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from hipq.client import Client, JobOut

NAMES = ["Ada", "Grace", "Linus", "Barbara"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("hipq_url")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--http", metavar="DOWNSTREAM_URL")
    where.add_argument("--kafka", metavar="REQUEST_TOPIC")
    # not the tour's "greetings" (declared in hipq.yaml with a Python target): a queue
    # of its own, so the producer never replaces a queue the config file declares
    parser.add_argument("--queue", default="remote-greetings")
    args = parser.parse_args()
    target = ({"kind": "kafka", "topic": args.kafka} if args.kafka else
              {"kind": "http", "url": args.http + "/greet/{id}", "mode": "callback"})

    with Client(args.hipq_url, token=os.environ.get("HIPQ_TOKEN")) as hipq:
        hipq.create_queue(args.queue, attempts=3, target=target)
        first = hipq.enqueue(args.queue, "hello-ada", {"name": "Ada"})
        print(f"hello-ada: {first.status}")
        jobs: list[dict[str, Any]] = [{"id": f"hello-{name.lower()}", "data": {"name": name}}
                                      for name in NAMES]
        jobs.append({"id": "hello-nobody", "data": {}})  # no name: the downstream fails it
        for result in hipq.enqueue_many(args.queue, jobs):  # any number: sent in chunks
            print(f"{result.id}: {result.status}")
        for job in jobs:
            done = wait(hipq, args.queue, job["id"])
            print(f"{done.id}: {done.status} {done.result or done.error}")


def wait(hipq: Client, queue: str, job_id: str, within: float = 60.0) -> JobOut:
    deadline = time.monotonic() + within
    while (job := hipq.get_job(queue, job_id)).status in ("queued", "running"):
        if time.monotonic() > deadline:
            raise SystemExit(f"{job_id} is still {job.status} after {within:.0f} s")
        time.sleep(0.1)
    return job


if __name__ == "__main__":
    main()

"""The ``hipq`` command: the only place that reads files and the environment, sets
up logging and installs signal handlers."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from hipq.config import Settings, format_validation_error, load_config
from hipq.daemon import Daemon, settle_heap
from hipq.engine.leases import timing_warnings
from hipq.engine.throttle import build_throttler
from hipq.errors import ConfigError, HipqError, StoreError
from hipq.log import setup_logging
from hipq.retry import build_retry
from hipq.schemas import EnqueueRequest
from hipq.service import Hipq, validate_queue
from hipq.store import Store, open_store
from hipq.store.schema import SCHEMA_VERSION
from hipq.targets import build_target

log = logging.getLogger("hipq")

EXIT_ERROR = 1
EXIT_CONFIG = 2


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_config(args.config)
        setup_logging(settings.logging.level, settings.logging.json_format)
        result: int = asyncio.run(args.func(args, settings))
        return result
    except ConfigError as exc:
        _fail(str(exc))
        return EXIT_CONFIG
    except HipqError as exc:
        _fail(_one_paragraph(str(exc)))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def _fail(message: str) -> None:
    sys.stderr.write(f"hipq: error: {message}\n")


def _one_paragraph(text: str) -> str:
    return " ".join(text.split())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hipq", description="A durable job scheduler daemon.")
    parser.add_argument("-c", "--config", default=None,
                        help="YAML config file (default ./hipq.yaml if present, else built-ins)")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the daemon (reconciler)")
    run.add_argument("--no-migrate", action="store_true",
                     help="do not create/upgrade the schema at start-up")
    run.set_defaults(func=cmd_run)

    sub.add_parser("migrate", help="create or upgrade the database schema").set_defaults(
        func=cmd_migrate)
    sub.add_parser("check-config", help="validate the config, its plugins and the database"
                   ).set_defaults(func=cmd_check_config)
    sub.add_parser("status", help="queues, depth, running weight, lag").set_defaults(
        func=cmd_status)

    enqueue = sub.add_parser("enqueue", help="enqueue one job")
    enqueue.add_argument("queue")
    enqueue.add_argument("--data", default="{}", help="JSON object")
    enqueue.add_argument("--id", default=None)
    enqueue.add_argument("--run-after", default=None, help="ISO 8601 time")
    enqueue.add_argument("--priority", type=int, default=None)
    enqueue.add_argument("--weight", type=int, default=None)
    enqueue.add_argument("--critical", action="store_true")
    enqueue.set_defaults(func=cmd_enqueue)

    replay = sub.add_parser("replay", help="replay a finished job as a new job")
    replay.add_argument("queue")
    replay.add_argument("id")
    replay.set_defaults(func=cmd_replay)

    show = sub.add_parser("show", help="show one job with its history")
    show.add_argument("queue")
    show.add_argument("id")
    show.set_defaults(func=cmd_show)
    return parser


async def _with_store(settings: Settings, fn: Callable[[Store], Awaitable[int]], *,
                      migrate: bool = False) -> int:
    store = await open_store(settings.database.url, pool_size=2)
    try:
        await _reach(store, settings)
        if migrate:
            await store.migrate()
        else:
            await store.check_schema()
        return await fn(store)
    finally:
        await store.close()


async def _reach(store: Store, settings: Settings) -> None:
    try:
        await store.ping()
    except (StoreError, OSError) as exc:
        where = settings.database.url.split("@")[-1]
        raise StoreError(f"cannot reach the database {where}: {exc}") from None


async def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    daemon = Daemon(settings, migrate=not args.no_migrate)
    store = await open_store(settings.database.url, pool_size=1)
    try:
        await _reach(store, settings)
    finally:
        await store.close()
    _check_queues(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ready = asyncio.Event()

    async def settle() -> None:
        await ready.wait()
        settle_heap()

    settling = asyncio.create_task(settle())
    try:
        await daemon.run(stop=stop, ready=ready)
    finally:
        settling.cancel()
    return 0


async def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    async def done(store: Store) -> int:
        service = Hipq(store)
        for queue in settings.queues:
            await service.create_queue(queue)
        sys.stdout.write(f"schema is at version {SCHEMA_VERSION}; "
                         f"{len(settings.queues)} queue(s) from the config applied\n")
        return 0

    return await _with_store(settings, done, migrate=True)


def _check_queues(settings: Settings) -> None:
    for index, queue in enumerate(settings.queues):
        where = f"queues[{index}] ({queue.id})"
        try:
            build_throttler(queue)
            build_retry(queue.retry)
            if queue.target is not None and queue.target.kind != "memory":
                build_target(queue.target)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        except HipqError as exc:
            raise ConfigError(f"{where}: {exc}") from None


async def cmd_check_config(args: argparse.Namespace, settings: Settings) -> int:
    _check_queues(settings)
    for queue in settings.queues:
        validate_queue(queue)
    store = await open_store(settings.database.url, pool_size=1)
    try:
        await _reach(store, settings)
    finally:
        await store.close()
    for warning in timing_warnings(interval_seconds=settings.reconcile.interval_seconds,
                                   lease_seconds=settings.reconcile.lease_seconds):
        sys.stderr.write(f"warning: {warning}\n")
    sys.stdout.write(f"config OK: {len(settings.queues)} queue(s), database reachable\n")
    return 0


async def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    async def show(store: Store) -> int:
        stats = await Hipq(store).stats()
        header = f"{'queue':<28} {'queued':>8} {'due':>8} {'running':>8} {'weight':>10} {'lag':>9}"
        lines = [header]
        for s in stats:
            capacity = "inf" if s.concurrency is None else str(s.concurrency)
            lag = "-" if s.oldest_due_age_seconds is None else f"{s.oldest_due_age_seconds:.1f}s"
            name = s.queue + (" (paused)" if s.paused else "")
            lines.append(f"{name:<28} {s.queued:>8} {s.due:>8} {s.running:>8} "
                         f"{f'{s.running_weight}/{capacity}':>10} {lag:>9}")
        sys.stdout.write("\n".join(lines) + "\n")
        return 0

    return await _with_store(settings, show)


async def cmd_enqueue(args: argparse.Namespace, settings: Settings) -> int:
    body: dict[str, Any] = {"data": _json_object(args.data, "--data")}
    if args.run_after:
        body["run_after"] = _iso(args.run_after)
    if args.priority is not None:
        body["priority"] = args.priority
    if args.weight is not None:
        body["weight"] = args.weight
    if args.critical:
        body["critical"] = True
    try:
        request = EnqueueRequest.model_validate(body)
    except PydanticValidationError as exc:
        raise ConfigError(format_validation_error(exc, "enqueue")) from None

    async def put(store: Store) -> int:
        outcome = await Hipq(store).enqueue(args.queue, args.id, request)
        sys.stdout.write(json.dumps({"id": outcome.id, "status": str(outcome.status)}) + "\n")
        return 0

    return await _with_store(settings, put)


async def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    async def again(store: Store) -> int:
        job = await Hipq(store).replay(args.queue, args.id)
        sys.stdout.write(json.dumps(job.to_json()) + "\n")
        return 0

    return await _with_store(settings, again)


async def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    async def show(store: Store) -> int:
        job, attempts = await Hipq(store).get_job(args.queue, args.id)
        out = job.to_json() | {"history": [a.to_json() for a in attempts]}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return 0

    return await _with_store(settings, show)


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{what}: not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{what}: must be a JSON object, got {type(value).__name__}")
    return value


def _iso(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--run-after: not an ISO 8601 time: {text!r}") from None


if __name__ == "__main__":
    raise SystemExit(main())

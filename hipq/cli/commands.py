"""The commands that run the daemon, set up the database and enqueue, show or
replay jobs (the operator's commands are in :mod:`hipq.cli.manage`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from datetime import datetime
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from hipq.api.origin import is_loopback
from hipq.bodies import EnqueueRequest
from hipq.cli.context import reach, run_command, with_store
from hipq.config import ApiConfig, Settings, format_validation_error
from hipq.daemon import Daemon, settle_heap
from hipq.engine.leases import timing_warnings
from hipq.engine.throttle import build_throttler
from hipq.errors import ConfigError, HipqError, StoreError
from hipq.retry import build_retry
from hipq.schedules import check_schedules
from hipq.service import Hipq, validate_queue
from hipq.store import Store, open_store
from hipq.store.schema import SCHEMA_VERSION
from hipq.targets import build_target

log = logging.getLogger("hipq")


def cmd_run(args: argparse.Namespace) -> int:
    return run_command(args, _run, daemon=True)


def check_exposure(api: ApiConfig) -> None:
    """docs/security.md: without tokens, the API listens only on a loopback address
    unless ``api.allow_insecure`` says otherwise (then with a warning)."""
    if not api.enabled or is_loopback(api.host):
        return
    if not api.tokens and not api.allow_insecure:
        raise ConfigError(f"api.host {api.host!r} is not a loopback address and api.tokens "
                          "is empty: anyone who reaches the port could drive hipq. Configure "
                          "api.tokens, listen on 127.0.0.1, or set api.allow_insecure: true")
    if not api.tokens:
        log.warning("the API listens on %s without tokens (api.allow_insecure): anyone who "
                    "reaches it can create queues and enqueue jobs", api.host,
                    extra={"action": "api_insecure"})
    else:
        log.warning("the API listens on %s; it speaks plain HTTP: put TLS in front of it",
                    api.host, extra={"action": "api_exposed"})


def warn_open_locally(api: ApiConfig) -> None:
    """A daemon without tokens on loopback: every local user can drive it (said once
    the config and the database passed their checks, beside the start line)."""
    if api.enabled and not api.tokens and is_loopback(api.host):
        log.warning("the API has no tokens (api.tokens): every local user and every "
                    "program on this machine can create queues and enqueue jobs",
                    extra={"action": "api_open_locally"})


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    check_exposure(settings.api)
    daemon = Daemon(settings, migrate=not args.no_migrate)
    store = await open_store(settings.database.url, pool_size=1)
    try:
        await reach(store, settings)
    finally:
        await store.close()
    check_queues(settings, args.config)
    check_schedules(settings)  # the cron strings; the queues once the store is open
    warn_open_locally(settings.api)
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


def cmd_migrate(args: argparse.Namespace) -> int:
    return run_command(args, _migrate)


async def _migrate(args: argparse.Namespace, settings: Settings) -> int:
    async def done(store: Store) -> int:
        service = Hipq(store)
        for queue in settings.queues:
            await service.create_queue(queue)
        sys.stdout.write(f"schema is at version {SCHEMA_VERSION}; "
                         f"{len(settings.queues)} queue(s) from the config applied\n")
        return 0

    return await with_store(settings, done, migrate=True)


def check_queues(settings: Settings, source: str | None = None) -> None:
    """Build every queue's throttler, retry strategy and target (importing the
    plugins they name); a :class:`ConfigError` names the file and the queue."""
    prefix = f"{source}: " if source else ""
    for index, queue in enumerate(settings.queues):
        where = f"{prefix}queues[{index}] ({queue.id})"
        if queue.target is not None and queue.target.kind == "kafka" and settings.kafka is None:
            raise ConfigError(f"{where}: a queue with a Kafka target needs a 'kafka:' section "
                              "(bootstrap_servers, ...) in the config")
        try:
            build_throttler(queue)
            build_retry(queue.retry.to_spec())
            if queue.target is not None and queue.target.kind != "memory":
                build_target(queue.target)
        except HipqError as exc:
            raise ConfigError(f"{where}: {exc}") from None


def cmd_check_config(args: argparse.Namespace) -> int:
    return run_command(args, _check_config)


async def _check_config(args: argparse.Namespace, settings: Settings) -> int:
    check_queues(settings, args.config)
    for queue in settings.queues:
        validate_queue(queue)
    store = await open_store(settings.database.url, pool_size=1)
    try:
        await reach(store, settings)
        check_schedules(settings, await _database_queues(store))
    finally:
        await store.close()
    for warning in timing_warnings(interval_seconds=settings.reconcile.interval_seconds,
                                   lease_seconds=settings.reconcile.lease_seconds):
        sys.stderr.write(f"warning: {warning}\n")
    sys.stdout.write(f"config OK: {len(settings.queues)} queue(s), "
                     f"{len(settings.schedules)} schedule(s), database reachable\n")
    return 0


async def _database_queues(store: Store) -> set[str]:
    """The queues stored in the database (none when it is not migrated yet)."""
    try:
        return {record.id for record in await store.queue_list()}
    except StoreError:
        return set()


def cmd_enqueue(args: argparse.Namespace) -> int:
    return run_command(args, _enqueue)


async def _enqueue(args: argparse.Namespace, settings: Settings) -> int:
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

    return await with_store(settings, put)


def cmd_replay(args: argparse.Namespace) -> int:
    return run_command(args, _replay)


async def _replay(args: argparse.Namespace, settings: Settings) -> int:
    async def again(store: Store) -> int:
        job = await Hipq(store).replay(args.queue, args.id)
        sys.stdout.write(json.dumps(job.to_json()) + "\n")
        return 0

    return await with_store(settings, again)


def cmd_show(args: argparse.Namespace) -> int:
    return run_command(args, _show)


async def _show(args: argparse.Namespace, settings: Settings) -> int:
    async def show(store: Store) -> int:
        job, attempts = await Hipq(store).get_job(args.queue, args.id)
        out = job.to_json() | {"history": [a.to_json() for a in attempts]}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return 0

    return await with_store(settings, show)


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


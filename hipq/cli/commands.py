"""The commands that run the daemon, set up the database and enqueue, show or
replay jobs (the operator's commands are in :mod:`hipq.cli.manage`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from hipq import tracing
from hipq.api.origin import is_loopback
from hipq.bodies import EnqueueRequest
from hipq.cli.context import missing_sqlite_file, reach, run_command, with_store
from hipq.cli.remote import Enqueued, enqueue_via_daemon
from hipq.config import ApiConfig, Settings, format_validation_error
from hipq.daemon import Daemon, settle_heap
from hipq.engine.leases import timing_warnings
from hipq.engine.throttle import build_throttler
from hipq.errors import ConfigError, HipqError, StoreError
from hipq.log import printable
from hipq.responses.signing import load_signer
from hipq.retry import build_retry
from hipq.schedules import check_schedules
from hipq.service import Hipq, new_job_id, validate_queue
from hipq.store import Store, open_store
from hipq.store.schema import SCHEMA_VERSION
from hipq.targets import build_target

log = logging.getLogger("hipq")
NOTIFY_CONNECT_SECONDS = 2.0
SETTLE_AFTER_SECONDS = 60.0  # the heap settles after the first tick, or this long at most


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
    start_traces(os.environ)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    ready = asyncio.Event()

    async def settle() -> None:
        await ready.wait()
        say_where(daemon)
        with contextlib.suppress(TimeoutError):  # the first tick adopts the running jobs
            await asyncio.wait_for(daemon.ticked.wait(), SETTLE_AFTER_SECONDS)
        settle_heap()  # what it adopted (what startup made is frozen already)

    settling = asyncio.create_task(settle())
    # what the imports and the settings made (some 64,000 objects) settles before the
    # API listens: the full collection (30-40 ms) stalls no request and no tick, and
    # the one after the first tick walks only what came since (under 1 ms)
    settle_heap()
    try:
        await daemon.run(stop=stop, ready=ready)
    finally:
        settling.cancel()
        tracing.tracer().close()  # open try spans end, buffered spans are sent
    return 0


def start_traces(environ: Mapping[str, str]) -> None:
    """OpenTelemetry spans when the ``OTEL_*`` variables ask for them and the SDK is
    installed (docs/traces.md); otherwise nothing is imported."""
    if not tracing.wanted(environ):
        return
    try:
        from hipq.otel import install_from_environment  # the SDK: only when asked for
    except ImportError:
        log.warning("OTEL_* variables are set but the OpenTelemetry SDK is not installed "
                    "(pip install 'hipq[otel]'): no spans", extra={"action": "traces_off"})
        return
    install_from_environment(environ)


def say_where(daemon: Daemon) -> None:
    """Once the daemon is up: where its dashboard is (on stdout, for the person who
    started it; the logs say it too, on stderr)."""
    if daemon.api is not None and daemon.api.port is not None:
        url = daemon.api.url
        sys.stdout.write(f"dashboard: {url}/   (API: {url}/v1/jobs, metrics: {url}/metrics)\n")
        sys.stdout.flush()


def cmd_migrate(args: argparse.Namespace) -> int:
    return run_command(args, _migrate)


async def _migrate(args: argparse.Namespace, settings: Settings) -> int:
    async def done(store: Store) -> int:
        await store.intake_limit_set(settings.api.max_body_bytes)  # hipq_enqueue()'s limit
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
    missing = missing_sqlite_file(settings)  # checked, not created
    if missing is None:
        store = await open_store(settings.database.url, pool_size=1)
        try:
            await reach(store, settings)
            check_schedules(settings, await _database_queues(store))
        finally:
            await store.close()
    else:
        check_schedules(settings, set())
    for warning in timing_warnings(interval_seconds=settings.reconcile.interval_seconds,
                                   lease_seconds=settings.reconcile.lease_seconds):
        sys.stderr.write(f"warning: {warning}\n")
    database = ("database reachable" if missing is None else
                f"database {missing} not created yet ('hipq migrate' or 'hipq run' creates it)")
    sys.stdout.write(f"config OK: {len(settings.queues)} queue(s), "
                     f"{len(settings.schedules)} schedule(s), {database}\n")
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

    job_id = args.id or new_job_id()  # the same id if the daemon's path falls through

    async def enqueue(store: Store) -> Enqueued:
        signer = await load_signer(store, settings.signing_key)
        sent = await enqueue_via_daemon(settings, args.queue, job_id,
                                        request.model_dump(mode="json", exclude_unset=True),
                                        signer=signer)
        if isinstance(sent, Enqueued):
            return sent
        if sent.warning is not None:  # said before the outcome, which may be an error
            sys.stderr.write(f"warning: {printable(sent.warning)}\n")
        return await _enqueue_direct(store, settings, args.queue, job_id, request)

    sent = await with_store(settings, enqueue)
    sys.stdout.write(json.dumps({"id": sent.id, "status": sent.status}) + "\n")
    return 0


async def _enqueue_direct(store: Store, settings: Settings, queue: str, job_id: str,
                          request: EnqueueRequest) -> Enqueued:
    """Write the job to the database; on PostgreSQL wake the daemons (NOTIFY), which
    would otherwise see it at their next tick (docs/operations.md)."""
    outcome = await Hipq(store).enqueue(queue, job_id, request)
    if store.supports_notify and settings.database.notify:
        await wake_daemons(settings.database.url)
    return Enqueued(id=outcome.id, status=str(outcome.status))


async def wake_daemons(url: str) -> None:
    """One NOTIFY ``wake`` to every daemon listening on this PostgreSQL database."""
    from hipq.store.notify import WAKE, Notifier

    notifier = Notifier(url, on_notify=lambda _payload: None)
    notifier.start()
    try:
        if await notifier.wait_connected(NOTIFY_CONNECT_SECONDS):
            await notifier.send_now(WAKE)
    finally:
        await notifier.stop()


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


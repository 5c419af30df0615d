"""The operator's commands: status, jobs, intake, cancel, pause, resume, prune. Each works
on the database named in the config; no daemon needs to run."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from hipq.cli.context import run_command, with_store
from hipq.cli.parser import LIVE_STATES
from hipq.clock import SystemClock
from hipq.config import Settings
from hipq.daemon import PRUNE_BATCH
from hipq.errors import ConfigError
from hipq.jobs import Job
from hipq.live_jobs import InvalidCursor, list_live
from hipq.log import printable
from hipq.service import Hipq
from hipq.store import QueueStats, Store
from hipq.store.records import IntakeRow

MAX_LIST = 1000


def _print(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


# -- status ----------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    return run_command(args, _status)


async def _status(args: argparse.Namespace, settings: Settings) -> int:
    # Ctrl-C ends --watch between two refreshes: no query is cancelled half-way (a
    # SQLite query runs in a thread; cancelling it under load could stall the close)
    stop = asyncio.Event()
    if args.watch:
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)

    async def show(store: Store) -> int:
        service = Hipq(store)
        clock = SystemClock()
        while not stop.is_set():
            stats = await service.stats()
            if args.json:
                counts = await service.response_counts()
                _print(json.dumps({"queues": [_stats_json(s) for s in stats],
                                   "responses": counts}))
            else:
                if args.watch:
                    sys.stdout.write("\x1b[H\x1b[2J" if sys.stdout.isatty() else "\n")
                    _print(f"hipq status at {clock.now():%Y-%m-%d %H:%M:%S} UTC (Ctrl-C ends)")
                _print(status_table(stats))
            if not args.watch:
                return 0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(args.interval, 0.1))
        return 0

    try:
        return await with_store(settings, show)
    except (KeyboardInterrupt, asyncio.CancelledError):
        return 0
    finally:
        if args.watch:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)


def _stats_json(s: QueueStats) -> dict[str, Any]:
    return {"queue": s.queue, "paused": s.paused, "queued": s.queued, "due": s.due,
            "running": s.running, "running_weight": s.running_weight,
            "concurrency": s.concurrency, "lag_seconds": s.oldest_due_age_seconds}


def status_table(stats: Sequence[QueueStats]) -> str:
    header = f"{'queue':<28} {'queued':>8} {'due':>8} {'running':>8} {'weight':>10} {'lag':>9}"
    lines = [header]
    for s in stats:
        capacity = "inf" if s.concurrency is None else str(s.concurrency)
        lag = "-" if s.oldest_due_age_seconds is None else f"{s.oldest_due_age_seconds:.1f}s"
        name = s.queue + (" (paused)" if s.paused else "")
        lines.append(f"{name:<28} {s.queued:>8} {s.due:>8} {s.running:>8} "
                     f"{f'{s.running_weight}/{capacity}':>10} {lag:>9}")
    if not stats:
        lines.append("(no queues)")
    return "\n".join(lines)


# -- jobs ------------------------------------------------------------------------------


def cmd_jobs(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= MAX_LIST:
        raise ConfigError(f"--limit must be between 1 and {MAX_LIST}, got {args.limit}")
    return run_command(args, _jobs)


async def _jobs(args: argparse.Namespace, settings: Settings) -> int:
    async def listed(store: Store) -> list[Job]:
        if args.state in LIVE_STATES:
            try:
                return (await list_live(store, queue=args.queue, state=args.state,
                                        limit=args.limit)).jobs
            except InvalidCursor:  # pragma: no cover - no cursor is given here
                return []
        await Hipq(store).get_queue(args.queue)  # QueueNotFound for a typo
        return await store.job_list_archived(queue=args.queue, status=args.state,
                                             limit=args.limit)

    jobs = await with_store(settings, listed)
    if args.json:
        for job in jobs:
            _print(json.dumps(job.to_json()))
    else:
        _print(jobs_table(jobs, args.state))
    return 0


def jobs_table(jobs: Sequence[Job], state: str) -> str:
    when = {"queued": "run_at", "running": "launched_at"}.get(state, "finished_at")
    lines = [f"{'id':<36} {'try':>5} {'prio':>5} {when:<20} error"]
    for job in jobs:
        at = getattr(job, when)
        stamp = "-" if at is None else f"{at:%Y-%m-%d %H:%M:%S}"
        error = "" if not job.error else printable(f"{job.error.get('kind', '')}: "
                                                   f"{str(job.error.get('detail', ''))[:60]}")
        lines.append(f"{job.id:<36} {f'{job.attempt}/{job.max_attempts}':>5} "
                     f"{job.priority:>5} {stamp:<20} {error}")
    if not jobs:
        lines.append(f"(no {state} jobs)")
    return "\n".join(lines)


# -- intake (enqueue from SQL; docs/from-your-database.md) --------------------------------


def cmd_intake(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= MAX_LIST:
        raise ConfigError(f"--limit must be between 1 and {MAX_LIST}, got {args.limit}")
    return run_command(args, _intake)


async def _intake(args: argparse.Namespace, settings: Settings) -> int:
    if not args.rejected:
        counts = await with_store(settings, lambda store: store.intake_counts())
        if args.queue is not None:
            counts = {q: c for q, c in counts.items() if q == args.queue}
        _print(json.dumps(intake_counts_json(counts)) if args.json else intake_table(counts))
        return 0
    rows = await with_store(settings, lambda store: store.intake_rejected_page(
        limit=args.limit, queue=args.queue))
    if args.json:
        for row in rows:
            _print(json.dumps(row.to_json()))
    else:
        _print(rejected_table(rows))
    return 0


def intake_counts_json(counts: dict[str, tuple[int, int]]) -> dict[str, Any]:
    return {"intake": {"pending": sum(p for p, _ in counts.values()),
                       "rejected": sum(r for _, r in counts.values())},
            "queues": [{"queue": q, "pending": p, "rejected": r}
                       for q, (p, r) in sorted(counts.items())]}


def intake_table(counts: dict[str, tuple[int, int]]) -> str:
    lines = [f"{'queue':<40} {'pending':>8} {'rejected':>9}"]
    lines += [f"{printable(q):<40} {p:>8} {r:>9}" for q, (p, r) in sorted(counts.items())]
    if not counts:
        lines.append("(the intake is empty)")
    return "\n".join(lines)


def rejected_table(rows: Sequence[IntakeRow]) -> str:
    lines = [f"{'rejected_at':<20} {'queue':<20} {'id':<30} error"]
    for row in rows:
        at = "-" if row.rejected_at is None else f"{row.rejected_at:%Y-%m-%d %H:%M:%S}"
        job_id = "-" if row.job_id is None else printable(row.job_id[:60])
        lines.append(f"{at:<20} {printable(row.queue[:60]):<20} {job_id:<30} "
                     f"{printable((row.error or '')[:200])}")
    if not rows:
        lines.append("(no rejected rows)")
    return "\n".join(lines)


# -- cancel, pause, resume ---------------------------------------------------------------


def cmd_cancel(args: argparse.Namespace) -> int:
    return run_command(args, _cancel)


async def _cancel(args: argparse.Namespace, settings: Settings) -> int:
    async def cancel(store: Store) -> Job:
        return await Hipq(store).cancel(args.queue, args.id)

    job = await with_store(settings, cancel)
    note = "" if job.status == "cancelled" else " (running: it ends at its owner's next tick)"
    _print(f"{args.queue}/{args.id}: cancel requested{note}; status {job.status}")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    return run_command(args, _pause)


def cmd_resume(args: argparse.Namespace) -> int:
    return run_command(args, _resume)


async def _pause(args: argparse.Namespace, settings: Settings) -> int:
    return await _set_paused(args.queue, True, settings)


async def _resume(args: argparse.Namespace, settings: Settings) -> int:
    return await _set_paused(args.queue, False, settings)


async def _set_paused(queue: str, paused: bool, settings: Settings) -> int:
    async def apply(store: Store) -> None:
        await Hipq(store).set_paused(queue, paused)

    await with_store(settings, apply)
    _print(f"{queue}: {'paused' if paused else 'resumed'}")
    return 0


# -- prune -----------------------------------------------------------------------------


def cmd_prune(args: argparse.Namespace) -> int:
    if args.older_than_days is not None and args.older_than_days < 0:
        raise ConfigError("--older-than-days must be 0 or more")
    return run_command(args, _prune)


async def _prune(args: argparse.Namespace, settings: Settings) -> int:
    days = (settings.archive.retention_days if args.older_than_days is None
            else args.older_than_days)
    before = SystemClock().now() - timedelta(days=days)

    async def prune(store: Store) -> tuple[int, int]:
        total, pruned = 0, PRUNE_BATCH
        while pruned == PRUNE_BATCH:  # small batches: no long transaction
            pruned = await store.archive_prune(before=before, limit=PRUNE_BATCH)
            total += pruned
        rejected, pruned = 0, PRUNE_BATCH
        while pruned == PRUNE_BATCH:  # rejected intake rows (docs/from-your-database.md)
            pruned = await store.intake_prune(before=before, now=SystemClock().now(),
                                              limit=PRUNE_BATCH)
            rejected += pruned
        return total, rejected

    total, rejected = await with_store(settings, prune)
    _print(f"pruned {total} archived job(s) finished before {before:%Y-%m-%d %H:%M:%S} UTC")
    _print(f"pruned {rejected} rejected intake row(s)")
    return 0

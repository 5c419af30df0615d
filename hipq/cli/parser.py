"""The command line: every command, its options, its help with examples.

Only :mod:`argparse` is imported here; each command names the function that runs
it (``module:function``), imported once the arguments are parsed.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

VERSION = "0.1.0"  # kept equal to hipq.__version__ (a test checks)

CONFIG_HELP = ("YAML config file (default: $HIPQ_CONFIG, else ./hipq.yaml if present, "
               "else built-in defaults: SQLite file hipq.db, port 8080)")

LIVE_STATES = ("queued", "running")
ARCHIVED_STATES = ("succeeded", "failed", "expired", "cancelled")


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    summary: str
    examples: str
    target: str  # module:function, imported when the command runs
    options: Callable[[argparse.ArgumentParser], None] | None = None


def _run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-migrate", action="store_true",
                   help="do not create/upgrade the schema at start-up")


def _enqueue(p: argparse.ArgumentParser) -> None:
    p.add_argument("queue", help="queue id")
    p.add_argument("--data", default="{}", help="the job's data, a JSON object (default {})")
    p.add_argument("--id", default=None, help="job id (default: a new UUID)")
    p.add_argument("--run-after", default=None, help="not before this ISO 8601 time")
    p.add_argument("--priority", type=int, default=None, help="lower runs first")
    p.add_argument("--weight", type=int, default=None, help="capacity the job takes")
    p.add_argument("--critical", action="store_true", help="use the critical capacity")


def _queue_and_id(p: argparse.ArgumentParser) -> None:
    p.add_argument("queue", help="queue id")
    p.add_argument("id", help="job id")


def _queue(p: argparse.ArgumentParser) -> None:
    p.add_argument("queue", help="queue id")


def _status(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    p.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    p.add_argument("--interval", type=float, default=2.0,
                   help="seconds between refreshes with --watch (default 2)")


def _jobs(p: argparse.ArgumentParser) -> None:
    p.add_argument("queue", help="queue id")
    p.add_argument("--state", default="queued", choices=(*LIVE_STATES, *ARCHIVED_STATES),
                   help="queued (queue order), running (launch order) or a final state "
                        "(newest first); default queued")
    p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")


def _intake(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rejected", action="store_true",
                   help="list the rejected rows with their error, newest first (without it: "
                        "the rows by queue, pending and rejected)")
    p.add_argument("--queue", default=None, help="only the rows naming this queue")
    p.add_argument("--limit", type=int, default=50,
                   help="at most this many rows with --rejected (default 50)")
    p.add_argument("--json", action="store_true",
                   help="JSON: one object per row with --rejected, else one document")


def _prune(p: argparse.ArgumentParser) -> None:
    p.add_argument("--older-than-days", type=float, default=None,
                   help="default: archive.retention_days of the config (30)")


def _demo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--keep-running", action="store_true",
                   help="stay up after the showcase to explore the dashboard (Ctrl-C ends)")
    p.add_argument("--jobs", type=int, default=400, help="jobs to run (default 400)")
    p.add_argument("--port", type=int, default=None,
                   help="API/dashboard port (default: the -c config's api.port, else any free)")
    p.add_argument("--seed", type=int, default=None, help="random seed (repeatable runs)")


_M = "hipq.cli.commands"
_J = "hipq.cli.manage"

COMMANDS: tuple[Command, ...] = (
    Command("run", "run the daemon: API, reconcile loop, response consumers",
            "  hipq run -c hipq.yaml\n  HIPQ_CONFIG=/etc/hipq.yaml hipq run\n"
            "  HIPQ_DATABASE_URL=postgresql+asyncpg://hipq@db/hipq hipq run",
            f"{_M}:cmd_run", _run),
    Command("demo", "a self-contained showcase on SQLite with a fake downstream (about 20 s)",
            "  hipq demo\n  hipq demo --keep-running    # then open the dashboard URL it prints\n"
            "  hipq demo -c hipq.yaml      # its api (port, tokens) and logging; not its "
            "database or queues",
            "hipq.demo:cmd_demo", _demo),
    Command("migrate", "create or upgrade the database schema (idempotent), apply the queues",
            "  hipq migrate -c hipq.yaml", f"{_M}:cmd_migrate"),
    Command("check-config", "validate the config, its plugins and targets, reach the database",
            "  hipq check-config -c hipq.yaml", f"{_M}:cmd_check_config"),
    Command("status", "queues: depth, due, running/capacity, lag",
            "  hipq status\n  hipq status --json | jq .queues\n  hipq status --watch",
            f"{_J}:cmd_status", _status),
    Command("enqueue", "enqueue one job",
            "  hipq enqueue emails --data '{\"to\": \"a@example.com\"}'\n"
            "  hipq enqueue emails --id welcome-42 --run-after 2030-01-01T09:00:00Z",
            f"{_M}:cmd_enqueue", _enqueue),
    Command("jobs", "list a queue's jobs: queued, running, or finished",
            "  hipq jobs emails\n  hipq jobs emails --state running\n"
            "  hipq jobs emails --state failed --limit 10", f"{_J}:cmd_jobs", _jobs),
    Command("intake", "jobs enqueued from SQL (hipq_enqueue(), hipq.sql): the rows not "
            "ingested yet, and those rejected with their error",
            "  hipq intake\n  hipq intake --rejected\n"
            "  hipq intake --rejected --queue orders --limit 10 --json",
            f"{_J}:cmd_intake", _intake),
    Command("show", "one job with every try", "  hipq show emails welcome-42",
            f"{_M}:cmd_show", _queue_and_id),
    Command("cancel", "cancel a queued job (a running one: at its owner's next tick)",
            "  hipq cancel emails welcome-42", f"{_J}:cmd_cancel", _queue_and_id),
    Command("replay", "run a finished job again as a new job",
            "  hipq replay emails welcome-42", f"{_M}:cmd_replay", _queue_and_id),
    Command("pause", "stop launching a queue's jobs (running ones still finish)",
            "  hipq pause emails", f"{_J}:cmd_pause", _queue),
    Command("resume", "launch a paused queue's jobs again", "  hipq resume emails",
            f"{_J}:cmd_resume", _queue),
    Command("prune", "delete archived jobs older than the retention time",
            "  hipq prune\n  hipq prune --older-than-days 7", f"{_J}:cmd_prune", _prune),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hipq", description="hipq: a durable job scheduler daemon.",
        epilog="Every command takes -c/--config (before or after its name); "
               "'hipq COMMAND --help' shows its options and examples.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--config", default=None, help=CONFIG_HELP)
    parser.add_argument("--version", action="version", version=f"hipq {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.summary, description=command.summary,
                           epilog="examples:\n" + command.examples,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("-c", "--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
        if command.options is not None:
            command.options(p)
        p.set_defaults(target=command.target)
    return parser

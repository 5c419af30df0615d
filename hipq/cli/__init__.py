"""The ``hipq`` command: the only place that reads files and the environment, sets
up logging and installs signal handlers.

Parsing imports nothing but :mod:`argparse` (``hipq --help`` answers at once); a
command's module is imported when it runs. ``-c/--config`` may come before or after
the command name; without it ``$HIPQ_CONFIG``, then ``./hipq.yaml``, then built-in
defaults. The config file's directory and the current directory are put first on the
import path (as uvicorn does), so plugins and Python targets in the user's own files
beside the config load by ``module:attr`` whatever directory the command runs in.

Output is for pipes too: when the reader goes away (``hipq jobs q --json | head -1``)
the command stops quietly with status 141 (128 + SIGPIPE), as Unix tools do.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from hipq.cli.parser import build_parser

EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_PIPE = 128 + signal.SIGPIPE  # the status of a tool the pipe's reader left
DAEMON_COMMAND = "hipq.cli.commands:cmd_run"
FROZENLIST_SWITCH = "FROZENLIST_NO_EXTENSIONS"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe is found here, not at interpreter exit
    except SystemExit:  # --help, --version, a usage error: argparse printed it
        _flush_or_silence()
        raise
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_PIPE
    return code


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    args.config = args.config or os.environ.get("HIPQ_CONFIG") or None
    import_paths(args.config)
    if args.target == DAEMON_COMMAND:
        lean_imports()
    module_name, _, func_name = args.target.partition(":")
    from hipq.errors import ConfigError, HipqError

    try:
        command = getattr(importlib.import_module(module_name), func_name)
        result: int = command(args)
        return result
    except ConfigError as exc:
        _fail(str(exc))
        return EXIT_CONFIG
    except HipqError as exc:
        _fail(" ".join(str(exc).split()))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def lean_imports() -> None:
    """Before ``hipq run`` imports aiohttp (docs/benchmarks.md, "Idle memory"):
    ``frozenlist`` (aiohttp's signal and middleware lists) loads without its C++
    extension, the process's only C++ code, which maps libstdc++: about 1 MB of RSS,
    for lists read about once per HTTP request (0.2 µs more a request in pure
    Python). Set ``FROZENLIST_NO_EXTENSIONS`` (an empty value keeps the extension)
    to decide it yourself; the variable set here is removed once ``frozenlist`` is
    imported, so processes the daemon starts see the environment it was given.
    Then aiohttp's two default client TLS contexts load the CA certificates at their
    first handshake, not at import: about 2 MB (:mod:`hipq.cli.lean_tls`)."""
    if "frozenlist" not in sys.modules and FROZENLIST_SWITCH not in os.environ:
        os.environ[FROZENLIST_SWITCH] = "1"
        try:
            import frozenlist  # noqa: F401  (it reads the variable once, at import)
        finally:
            del os.environ[FROZENLIST_SWITCH]
    from hipq.cli.lean_tls import defer_aiohttp_ca_loading

    defer_aiohttp_ca_loading()


def import_paths(config: str | None) -> None:
    """The config file's directory, then the current directory, first on the import
    path: ``mytargets.py`` beside the config is found from anywhere (docs/configuration.md)."""
    config_dir = str(Path(config).absolute().parent) if config else None
    for directory in (os.getcwd(), config_dir):  # inserted at 0: the last one ends first
        if directory is not None:
            if directory in sys.path:
                sys.path.remove(directory)
            sys.path.insert(0, directory)


def _silence_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered for the gone reader is
    dropped, and Python's own flush at exit finds nothing to complain about."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _flush_or_silence() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


def _fail(message: str) -> None:
    """The error on stderr: its own line breaks kept, other control characters escaped."""
    from hipq.log import printable

    lines = "\n".join(printable(line) for line in message.split("\n"))
    sys.stderr.write(f"hipq: error: {lines}\n")


__all__ = ["EXIT_CONFIG", "EXIT_ERROR", "EXIT_PIPE", "main"]

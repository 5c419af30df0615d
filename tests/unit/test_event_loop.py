"""``event_loop``: ``hipq run`` runs on uvloop where it is installed (auto), on it or
fails clearly (uvloop), or on asyncio's own loop (asyncio); other commands always
use asyncio's."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import pytest

from hipq.cli.context import loop_factory, run_command
from hipq.config import Settings, load_config
from hipq.errors import ConfigError


def test_asyncio_is_the_standard_loop() -> None:
    assert loop_factory("asyncio") is None


def test_auto_and_uvloop_pick_uvloop_when_installed() -> None:
    uvloop = pytest.importorskip("uvloop")
    assert loop_factory("auto") is uvloop.new_event_loop
    assert loop_factory("uvloop") is uvloop.new_event_loop


def test_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    assert loop_factory("auto") is None
    with pytest.raises(ConfigError, match="uvloop is not installed"):
        loop_factory("uvloop")


def test_an_unknown_choice_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "hipq.yaml"
    config.write_text("event_loop: tokio\n")
    with pytest.raises(ConfigError, match="event_loop"):
        load_config(str(config))


@pytest.mark.parametrize(("choice", "daemon", "module"), [
    ("auto", True, "uvloop"), ("asyncio", True, "asyncio"), ("auto", False, "asyncio")])
def test_run_command_uses_the_configured_loop_for_the_daemon(
        tmp_path: Path, choice: str, daemon: bool, module: str) -> None:
    pytest.importorskip("uvloop")
    config = tmp_path / "hipq.yaml"
    config.write_text(f"event_loop: {choice}\n")
    seen: list[str] = []

    async def command(args: argparse.Namespace, settings: Settings) -> int:
        seen.append(type(asyncio.get_running_loop()).__module__.split(".")[0])
        return 0

    args = argparse.Namespace(config=str(config))
    assert run_command(args, command, daemon=daemon) == 0
    assert seen == [module]

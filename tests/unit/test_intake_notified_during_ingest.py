"""A producer's NOTIFY that arrives while the intake is being read is not lost: the
next tick looks at the intake again (it used to wait for the periodic tick, up to
``interval_seconds``, because the end of the ingest reset the flag the notification
had just set)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hipq.config import Settings
from hipq.daemon import Daemon
from hipq.store.notify import INTAKE


async def test_a_notification_during_the_ingest_makes_the_next_tick_look_again(
        tmp_path: Path, monkeypatch: Any) -> None:
    settings = Settings.model_validate({
        "database": {"url": f"sqlite+aiosqlite:///{tmp_path}/hipq.db"},
        "api": {"enabled": False}})
    daemon = Daemon(settings)
    await daemon.open()
    try:
        looks: list[int] = []

        async def ingest(owned: Any, known: Any) -> bool:
            looks.append(1)
            if len(looks) == 1:
                daemon._notified(INTAKE)  # a commit lands while the rows are read
            return False

        monkeypatch.setattr(daemon.parts.intake, "ingest", ingest)
        daemon._intake_due = True
        assert await daemon._ingest() is False
        assert daemon._intake_due  # the notification stands
        await daemon._ingest()
        assert len(looks) == 2
        assert not daemon._intake_due
    finally:
        await daemon.shutdown()

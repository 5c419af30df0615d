"""The SQLite database and its side files are readable by their owner only
(docs/security.md, "A local user"): they hold target credentials and the signing
key. SQLite gives ``-wal`` and ``-shm`` the mode of the database file."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path

from hipq.config import QueueConfig
from hipq.store import open_store


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_database_and_its_side_files_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask: files would be -rw-r--r--
    try:
        db = tmp_path / "hipq.db"
        store = await open_store(f"sqlite+aiosqlite:///{db}")
        try:
            await store.migrate()
            config = QueueConfig.model_validate({"id": "q", "target": {
                "kind": "http", "url": "http://127.0.0.1:9/x",
                "auth": {"type": "bearer", "token": "s3cret"}}})
            await store.queue_upsert(config.stored(), now=datetime(2026, 1, 1, tzinfo=UTC))
            side = [tmp_path / "hipq.db-wal", tmp_path / "hipq.db-shm"]
            assert all(p.exists() for p in side)
            assert {p.name: _mode(p) for p in [db, *side]} == {
                "hipq.db": 0o600, "hipq.db-wal": 0o600, "hipq.db-shm": 0o600}
        finally:
            await store.close()
    finally:
        os.umask(old)


async def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    db.touch(mode=0o640)
    os.chmod(db, 0o640)  # an operator's choice (a group that backs it up)
    store = await open_store(f"sqlite+aiosqlite:///{db}")
    try:
        await store.migrate()
    finally:
        await store.close()
    assert _mode(db) == 0o640

"""``hipq migrate`` holds an advisory lock: replicas starting together on an empty
database all migrate it without error."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import asyncpg
import pytest
import yaml

from hipq.store.schema import SCHEMA_VERSION
from tests.scale.cluster import REPO

pytestmark = pytest.mark.slow


async def test_three_concurrent_migrations_on_an_empty_database(
        database: tuple[str, str], tmp_path: Path) -> None:
    pg, url = database
    config = tmp_path / "migrate.yaml"
    config.write_text(yaml.safe_dump({"database": {"url": url}}), encoding="utf-8")
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hipq", "-c", str(config), "migrate", cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT) for _ in range(3)]
    outputs = [await p.communicate() for p in procs]
    for proc, (out, _) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out.decode()
    conn = await asyncpg.connect(pg)
    try:
        version = await conn.fetchval(
            "SELECT value FROM hipq_meta WHERE key = 'schema_version'")
    finally:
        await conn.close()
    assert version == str(SCHEMA_VERSION)

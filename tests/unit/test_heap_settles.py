"""``hipq run`` settles its heap (hipq.daemon.settle_heap: a full collection, then
``gc.freeze``) before the API listens, so the 30-40 ms collection of what the
imports and the settings made stalls no request and no tick; the settle after the
first tick (the adopted tries) then walks only what came since. Checked in a fresh
interpreter running the real command on SQLite, with ``Daemon.run`` wrapped to read
the collector's state at the moment the daemon says it is ready."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

RUN = """
import asyncio, gc, json, sys

from hipq.cli import main
from hipq.daemon import Daemon

seen = {}
real_run = Daemon.run


async def run(self, *, stop, ready=None):
    async def watch():
        await ready.wait()  # the API listens
        seen["frozen_when_ready"] = gc.get_freeze_count()
        await self.tick()
        await asyncio.sleep(0.05)  # hipq run's settle after the first tick
        seen["frozen_after_tick"] = gc.get_freeze_count()
        seen["threshold"] = gc.get_threshold()[0]
        stop.set()

    watching = asyncio.ensure_future(watch())
    await real_run(self, stop=stop, ready=ready)
    await watching


Daemon.run = run
code = main(["-c", sys.argv[1], "run"])
print(json.dumps({"code": code, **seen}))
"""


def test_the_heap_settles_before_the_api_listens(tmp_path: Path) -> None:
    config = tmp_path / "hipq.yaml"
    config.write_text(yaml.safe_dump({
        "database": {"url": f"sqlite+aiosqlite:///{tmp_path / 'hipq.db'}"},
        "api": {"host": "127.0.0.1", "port": 0},
        "queues": [{"id": "q", "target": {"kind": "http", "url": "http://127.0.0.1:9/x"}}]}))
    out = subprocess.run([sys.executable, "-c", RUN, str(config)], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["code"] == 0
    # the imports and the settings: tens of thousands of objects, frozen before ready
    assert seen["frozen_when_ready"] > 10_000, seen
    assert seen["frozen_after_tick"] >= seen["frozen_when_ready"], seen
    assert seen["threshold"] == 50_000, seen

"""A real ``hipq run`` subprocess for black-box tests: started from a config in a
temporary directory, yielding its base URL, stopped with SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).parents[2]
START_SECONDS = 30


@asynccontextmanager
async def hipq_run_process(workdir: Path, config: dict[str, Any], *,
                           clean_exit: bool = True) -> AsyncIterator[str]:
    """Run ``hipq -c hipq.yaml run`` in ``workdir`` (its log in ``run.log``); yield the
    URL its API listens on. With ``clean_exit``, check it stopped with 0 and no
    traceback."""
    (workdir / "hipq.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = str(ROOT)
    log_path = workdir / "run.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(  # noqa: ASYNC220 (returns at once; the test owns it)
            [sys.executable, "-m", "hipq", "-c", "hipq.yaml", "run"],
            cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_SECONDS
        while not (found := re.search(r"API listening on (http://\S+)", log_path.read_text())):
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            await asyncio.sleep(0.05)  # polling the subprocess's log: no signal to wait on
        yield found.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(proc.wait, 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = await asyncio.to_thread(proc.wait, 10)
    if clean_exit:
        assert code == 0, log_path.read_text()
        assert "Traceback" not in log_path.read_text(), log_path.read_text()

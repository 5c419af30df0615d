"""The README's five-minute tour, as written: the files it shows (``hipq.yaml``,
``mytargets.py``) and its commands in order, read from README.md itself (a change to
the tour changes this test), in an empty directory, with the real ``hipq`` command.

``hipq run &`` runs in the background as typed; the next command waits for the line
it prints once it is up (``dashboard: ...``), as a person does. The job must show in
``hipq jobs greetings --state succeeded`` (run once, as typed, right after ``hipq
status``) and must have finished within 1 s of its enqueue (the daemon's own
timestamps): the CLI's enqueue goes through the daemon, not its next tick.

The tour's config listens on the default port 8080: the tour runs in a network
namespace of its own (``unshare -rn``) where 8080 is free whatever this machine runs;
without namespaces it runs on the machine's 8080 if free, else it is skipped.
(``hipq demo``, the tour's first block, is tested by tests/e2e/test_demo.py.)
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.slow
_COMMENT = re.compile(r"\s+#\s.*$")


def tour_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## A five-minute tour")
    return text[start:text.index("\n## ", start + 1)]


def tour_blocks() -> list[tuple[str, str]]:
    """The tour's code blocks in order: (language, text)."""
    return re.findall(r"```(\w+)\n(.*?)```", tour_section(), re.S)


def tour_files() -> dict[str, str]:
    """The files the tour shows: a block whose first line is ``# <name>`` (or
    ``# <name>, ...``) is that file, verbatim."""
    files = {}
    for _, text in tour_blocks():
        first = text.splitlines()[0]
        named = re.match(r"# ([\w.]+\.(?:yaml|py))\b", first)
        if named:
            files[named.group(1)] = text
    return files


def tour_commands() -> list[str]:
    """The commands of the ``sh`` block that runs the daemon, comments dropped."""
    blocks = [text for lang, text in tour_blocks() if lang == "sh" and "hipq run &" in text]
    assert len(blocks) == 1, "the tour has one sh block with 'hipq run &'"
    lines = [_COMMENT.sub("", line).strip() for line in blocks[0].splitlines()]
    return [line for line in lines if line]


def _script(commands: list[str]) -> str:
    """A bash script running ``commands`` in order: each one's output kept apart,
    ``X &`` in the background until it says where its dashboard is, ``open URL``
    as a GET of the URL."""
    out = ["set -u", "ip link set lo up 2>/dev/null || true", "daemon="]
    for n, command in enumerate(commands):
        if command.endswith("&"):
            out += [f"{command[:-1].strip()} > run.log 2>&1 &", "daemon=$!",
                    "for _ in $(seq 600); do grep -q '^dashboard: ' run.log && break; "
                    "kill -0 $daemon 2>/dev/null || break; sleep 0.05; done"]
        elif command.startswith("open "):
            url = shlex.quote(command.split()[1])
            out.append(f"python -c 'import sys, urllib.request; print(urllib.request."
                       f"urlopen(sys.argv[1], timeout=10).status)' {url} > out{n}.txt "
                       f"2> err{n}.txt; echo $? > rc{n}.txt")
        else:
            out.append(f"{command} > out{n}.txt 2> err{n}.txt; echo $? > rc{n}.txt")
    out += ["hipq jobs greetings --state succeeded --json > final.json",
            'if [ -n "$daemon" ]; then kill -TERM $daemon; wait $daemon; echo $? > run.rc; fi']
    return "\n".join(out) + "\n"


def _sandbox() -> list[str]:
    """``unshare -rn`` where it works (a loopback of our own), else nothing when
    8080 is free here, else skip."""
    if shutil.which("unshare") and subprocess.run(
            ["unshare", "-rn", "true"], capture_output=True, check=False).returncode == 0:
        return ["unshare", "-rn"]
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8080)) == 0:
            pytest.skip("port 8080 is in use and network namespaces are not available")
    return []


def test_the_readme_tour_as_written(tmp_path: Path) -> None:
    files = tour_files()
    assert set(files) == {"hipq.yaml", "mytargets.py"}, files
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    commands = tour_commands()
    assert [c.split()[:2] for c in commands] == [
        ["hipq", "migrate"], ["hipq", "run"], ["hipq", "enqueue"], ["hipq", "status"],
        ["hipq", "jobs"], ["open", "http://127.0.0.1:8080/"]]
    (tmp_path / "tour.sh").write_text(_script(commands))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([*_sandbox(), "bash", "tour.sh"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    log = (tmp_path / "run.log").read_text() if (tmp_path / "run.log").exists() else ""
    context = f"{done.stdout}{done.stderr}\nrun.log:\n{log}"

    def output(n: int) -> str:
        rc = (tmp_path / f"rc{n}.txt").read_text().strip()
        assert rc == "0", (commands[n], (tmp_path / f"err{n}.txt").read_text(), context)
        return (tmp_path / f"out{n}.txt").read_text()

    assert "schema is at version" in output(0)
    assert re.search(r"^dashboard: http://127\.0\.0\.1:8080/", log, re.M), context
    enqueued = json.loads(output(2))
    assert enqueued["status"] == "created"
    assert "greetings" in output(3)
    assert enqueued["id"] in output(4), context  # succeeded by the time it is typed
    assert output(5).strip() == "200"  # the dashboard
    [job] = [json.loads(line) for line in (tmp_path / "final.json").read_text().splitlines()]
    assert job["result"] == {"greeting": "hello, ann"}
    took = (datetime.fromisoformat(job["finished_at"])
            - datetime.fromisoformat(job["created_at"])).total_seconds()
    assert took < 1.0, (took, context)
    assert (tmp_path / "run.rc").read_text().strip() == "0", context
    assert "Traceback" not in log

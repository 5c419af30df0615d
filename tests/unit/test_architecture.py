"""The layout's rules, checked: dependencies point inward, no import cycle, the
plugin API is light, no module grows past what a reader takes in."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "hipq"
IO_LIBRARIES = ("sqlalchemy", "asyncpg", "aiosqlite", "aiohttp", "aiokafka", "apscheduler",
                "pydantic", "yaml", "httpx")
MAX_LINES = 700


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path) -> set[str]:
    """hipq modules imported when ``path`` is imported (module level, outside
    ``if TYPE_CHECKING``; function-level imports run later and are left out)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef
                                                    | ast.ClassDef) else ():
            if isinstance(sub, ast.Import):
                found.update(a.name for a in sub.names if a.name.startswith("hipq"))
            elif isinstance(sub, ast.ImportFrom) and sub.module and sub.module.startswith("hipq"):
                found.add(sub.module)
                found.update(f"{sub.module}.{a.name}" for a in sub.names)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {m for m in _runtime_imports(path) if m in modules and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_no_import_cycle() -> None:
    graph = _graph()
    # a package's __init__ re-exporting its submodules is not a cycle of the design
    for name in list(graph):
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    assert _cycle(graph) is None


@pytest.mark.parametrize("module", ["hipq.throttling", "hipq.plugins", "hipq.jobs",
                                    "hipq.spec", "hipq.retry", "hipq.engine.decide"])
def test_pure_modules_do_not_reach_outward(module: str) -> None:
    graph = _graph()
    forbidden = {"hipq.config", "hipq.plugins", "hipq.api", "hipq.daemon", "hipq.service"}
    if module == "hipq.plugins":
        forbidden.discard("hipq.plugins")
    if module in ("hipq.retry", "hipq.engine.decide"):
        forbidden -= {"hipq.plugins", "hipq.config"}  # the retry config is their input
    reached = {m for m in graph if m == module or m.startswith(module + ".")}
    for name in reached:
        bad = {m for m in graph[name] if any(m == f or m.startswith(f + ".") for f in forbidden)}
        assert not bad, f"{name} imports {sorted(bad)}"


def test_throttling_imports_neither_config_nor_plugins() -> None:
    for path in (PACKAGE / "throttling").glob("*.py"):
        imports = _runtime_imports(path) | {
            n.module for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.ImportFrom) and n.module}
        assert not {m for m in imports if m.startswith(("hipq.config", "hipq.plugins"))}, path


def test_plugin_api_imports_no_io_library() -> None:
    code = ("import sys, hipq.plugins; "
            f"print(','.join(m for m in {IO_LIBRARIES!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == ""


def test_a_daemon_without_kafka_does_not_load_aiokafka() -> None:
    """aiokafka is 5 MB of a daemon's memory: loaded only when Kafka is configured."""
    code = "import sys, hipq.daemon, hipq.cli.commands; print('aiokafka' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def test_no_module_is_too_long() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_only_the_store_factory_knows_the_database_kind() -> None:
    hits = [f"{p.relative_to(PACKAGE)}:{i}" for p in PACKAGE.rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if "is_postgres" in line]
    assert len(hits) <= 1, hits

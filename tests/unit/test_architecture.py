"""The layout's rules, checked: dependencies point inward, no import cycle (imports
inside functions counted), nothing below the HTTP API imports it, the pure core (the
plugin API among it) loads no I/O library, no module grows past what a reader takes
in."""

from __future__ import annotations

import ast
import gc
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "hipq"
IO_LIBRARIES = ("sqlalchemy", "asyncpg", "aiosqlite", "aiohttp", "aiokafka", "apscheduler",
                "pydantic", "yaml", "httpx", "httptools", "yarl", "prometheus_client", "uvloop",
                "multidict")
# the pure core: importing one of these loads no I/O library, whatever it imports in turn
PURE_MODULES = (
    "hipq.jobs", "hipq.spec", "hipq.paths", "hipq.pause_scope", "hipq.plugins", "hipq.retry",
    "hipq.queue_settings", "hipq.throttling",
    *sorted(f"hipq.throttling.{p.stem}" for p in (PACKAGE / "throttling").glob("*.py")
            if p.stem != "__init__"),
    "hipq.engine.decide", "hipq.engine.batch", "hipq.engine.held", "hipq.engine.result",
    "hipq.engine.tick_driver", "hipq.engine.requests", "hipq.engine.inline", "hipq.engine.leases",
    "hipq.engine.inbox", "hipq.engine.partner_word", "hipq.store.records", "hipq.store.base",
    "hipq.partners", "hipq.partners.headers", "hipq.partners.buckets", "hipq.partners.learning",
)
MAX_LINES = 700


@pytest.fixture(autouse=True)
def _no_collection_while_parsing() -> Iterator[None]:
    """No garbage collection while these tests parse: on Python 3.11.7 a finalizer that
    runs inside ``ast.parse`` (a task an earlier test of the worker left pending,
    logging as it is destroyed) fails the parse with "AST constructor recursion depth
    mismatch" (CPython gh-106905, fixed in 3.11.8)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the nodes under an ``if TYPE_CHECKING:`` block (read by type
    checkers, never run)."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(sub) for stmt in node.body for sub in ast.walk(stmt))
    return hidden


def _absolute(module: str | None, level: int, importer: str, is_package: bool) -> str | None:
    """The module a ``from`` import names, a relative one resolved against ``importer``."""
    if level == 0:
        return module
    base = importer.split(".")
    base = base[:len(base) - level + (1 if is_package else 0)]
    return ".".join([*base, *([module] if module else [])])


def _runtime_imports(path: Path, *, in_functions: bool = True) -> set[str]:
    """hipq modules imported when ``path`` is imported or when its functions run
    (outside ``if TYPE_CHECKING``): an import deferred into a function is still a
    dependency of the module, so it counts for cycles and for layering.
    ``in_functions=False``: only what importing the module itself runs."""
    tree = ast.parse(path.read_text())
    hidden = _type_checking_only(tree)
    name = _module_name(path)
    is_package = path.name == "__init__.py"
    if in_functions:
        nodes = [n for n in ast.walk(tree) if id(n) not in hidden]
    else:
        nodes = []
        for node in tree.body:
            if id(node) in hidden or isinstance(
                    node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            nodes.extend(n for n in ast.walk(node) if id(n) not in hidden)
    found: set[str] = set()
    for sub in nodes:
        if isinstance(sub, ast.Import):
            found.update(a.name for a in sub.names if a.name.startswith("hipq"))
        elif isinstance(sub, ast.ImportFrom):
            module = _absolute(sub.module, sub.level, name, is_package)
            if module and module.startswith("hipq"):
                found.add(module)
                found.update(f"{module}.{a.name}" for a in sub.names)
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


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _design_graph() -> dict[str, set[str]]:
    graph = _graph()
    # a package's __init__ re-exporting its submodules is not a cycle of the design
    for name in list(graph):
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    return graph


def test_no_import_cycle() -> None:
    """No two hipq modules need each other, counting the imports inside functions
    (deferring an import hides a cycle from Python, not from a reader)."""
    graph = _design_graph()
    assert _cycle(graph) is None
    assert _cycles(graph) == []


def test_the_cycle_check_sees_imports_in_functions() -> None:
    """``hipq.metrics`` imports nothing of the exporter, at any depth; the API's
    ``/metrics`` page imports it in its handler (prometheus_client at the first scrape)."""
    graph = _graph()
    assert "hipq.metrics_export" not in graph["hipq.metrics"]
    assert "hipq.metrics_export" in graph["hipq.api.metrics_page"]
    assert "hipq.metrics_export" not in _runtime_imports(
        PACKAGE / "api" / "metrics_page.py", in_functions=False)
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# Above the API: what serves it (the daemon), what talks to it (the CLI, the
# client, which reads its wire models, hipq.api.models), and the programs on top
# (the demo, ``python -m hipq``). Everything else is below it and never imports it.
ABOVE_THE_API = ("hipq.api", "hipq.daemon", "hipq.cli", "hipq.client", "hipq.demo",
                 "hipq.__main__")


def test_nothing_below_the_api_imports_it() -> None:
    """The layers, from the inside out: the pure core (jobs, spec, plugins,
    throttling, the engine's plan), the engine, the store, the targets and the
    responses, the service (``hipq.service``: the Python API) and what runs beside it
    (the intake, the schedules, the metrics); then ``hipq.api``, the HTTP API over
    the service; then the modules of :data:`ABOVE_THE_API`. A module below the API
    that needs something of it (a check, a model) gets it moved down to its own
    module (``hipq.json_types``, ``hipq.schedules.ScheduleState``)."""
    graph = _graph()
    below = sorted(
        f"{module} imports {sorted(m for m in imports if m.startswith('hipq.api'))}"
        for module, imports in graph.items()
        if not module.startswith(ABOVE_THE_API)
        and any(m == "hipq.api" or m.startswith("hipq.api.") for m in imports))
    assert below == []


def test_pure_modules_do_not_reach_outward() -> None:
    """The pure core imports neither the configuration models nor the API, the CLI,
    the daemon or the service; the plugin API's own building blocks (jobs, spec,
    paths, throttling) do not import the plugin API (retry and decide use its types)."""
    graph = _graph()
    edge = ("hipq.config", "hipq.api", "hipq.cli", "hipq.daemon", "hipq.service")
    under_plugins = ("hipq.jobs", "hipq.spec", "hipq.paths", "hipq.throttling")
    for module in PURE_MODULES:
        forbidden = edge + (("hipq.plugins",) if module.startswith(under_plugins) else ())
        bad = {m for m in graph[module] if m.startswith(forbidden)}
        assert not bad, f"{module} imports {sorted(bad)}"


def test_throttling_imports_neither_config_nor_plugins() -> None:
    for path in (PACKAGE / "throttling").glob("*.py"):
        imports = _runtime_imports(path) | {
            n.module for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.ImportFrom) and n.module}  # TYPE_CHECKING ones too
        assert not {m for m in imports if m.startswith(("hipq.config", "hipq.plugins"))}, path


def _imported_anywhere(path: Path) -> set[str]:
    """Every module ``path`` names for import, wherever: at module level, under ``if
    TYPE_CHECKING``, in a function or a class; ``from a import b`` counts as ``a``
    and ``a.b``, a relative import resolved; a string that is a whole dotted name
    counts too (``importlib.import_module("x")``, a table of lazy imports)."""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[:len(package) - node.level + 1], node.module or ""]
                            if node.level else [node.module or ""]).strip(".")
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", node.value)):
            found.add(node.value)
    return found


# what the store must not import: it speaks hipq.spec types and JSON mappings
NOT_IN_THE_STORE = ("hipq.config", "pydantic", "pydantic_core")


def test_the_store_imports_neither_the_config_nor_pydantic() -> None:
    """No module under ``hipq/store`` imports ``hipq.config`` or pydantic, for typing
    or at run time, at module level or in a function (comments aside, nothing is
    exempt): a queue's settings come and go as a JSON mapping and a
    :class:`~hipq.spec.QueueSpec` (:mod:`hipq.queue_settings`)."""
    bad = sorted(f"{path.relative_to(PACKAGE)}: {module}"
                 for path in (PACKAGE / "store").rglob("*.py")
                 for module in _imported_anywhere(path)
                 if any(module == name or module.startswith(name + ".")
                        for name in NOT_IN_THE_STORE))
    assert bad == []


def test_no_store_module_loads_the_config_or_pydantic() -> None:
    """By the whole import chain: every module of the store imported in a fresh
    interpreter leaves neither ``hipq.config`` nor pydantic in ``sys.modules``."""
    modules = sorted(_module_name(p) for p in (PACKAGE / "store").rglob("*.py"))
    code = (f"import importlib, sys; [importlib.import_module(m) for m in {modules!r}]; "
            "print(','.join(sorted(m for m in sys.modules "
            f"if m.partition('.')[0] in {NOT_IN_THE_STORE[1:]!r} or m == 'hipq.config')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    assert out == "", f"importing the store loads {out}"


@pytest.mark.parametrize("module", ["hipq", *PURE_MODULES])
def test_pure_modules_load_no_io_library(module: str) -> None:
    """Pure by the whole import chain, not file by file: imported in a fresh
    interpreter (its packages' ``__init__``s and all they import included), the
    module leaves no I/O library in ``sys.modules``. No exemptions."""
    code = (f"import sys, {module}; "
            "print(','.join(sorted({m.partition('.')[0] for m in sys.modules} "
            f"& {set(IO_LIBRARIES)!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    assert out == "", f"importing {module} loads {out}"


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


def _names_dialect(node: ast.expr) -> bool:
    return ((isinstance(node, ast.Attribute) and node.attr == "dialect")
            or (isinstance(node, ast.Name) and node.id == "dialect"))


# a producer's own connection (docs/from-your-database.md), not the store
DIALECT_ALLOWED = ("store/", "sql.py")


def test_no_dialect_is_compared_outside_the_store() -> None:
    """Outside ``hipq/store/`` the code asks the store what it can do
    (``supports_*``), never which database it is (``.dialect == ...``)."""
    hits = []
    for path in PACKAGE.rglob("*.py"):
        where = str(path.relative_to(PACKAGE))
        if where.startswith(DIALECT_ALLOWED):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                    _names_dialect(side) for side in (node.left, *node.comparators)):
                hits.append(f"{where}:{node.lineno}")
    assert hits == []


def _store_use(node: ast.AST) -> bool:
    """``store.x``, ``self.store.x``, ``self._store.x`` or ``getattr(self._store, ...)``."""
    def is_store(value: ast.expr) -> bool:
        return ((isinstance(value, ast.Name) and value.id == "store")
                or (isinstance(value, ast.Attribute) and value.attr in ("store", "_store")))

    if isinstance(node, ast.Attribute):
        return is_store(node.value)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "getattr" and bool(node.args) and is_store(node.args[0]))


def test_at_most_two_engine_modules_call_the_store() -> None:
    """The tick's plan asks; the executor awaits the store (and the launcher confirms
    launches in the background): docs/internals.md, "The executor"."""
    calling = sorted(path.name for path in (PACKAGE / "engine").glob("*.py")
                     if any(_store_use(n) for n in ast.walk(ast.parse(path.read_text()))))
    assert calling == ["executor.py", "launcher.py"]


# the tick's plan and the parts it delegates to: generators, never coroutines
PLAN_MODULES = ("plan", "selection", "fates", "claims", "inline", "requests", "decide",
                "batch", "held", "inbox", "leases", "partner_word", "budgets", "jobs_on_demand",
                "rates", "result")


@pytest.mark.parametrize("module", PLAN_MODULES)
def test_the_plan_awaits_nothing(module: str) -> None:
    tree = ast.parse((PACKAGE / "engine" / f"{module}.py").read_text())
    awaits = [n.lineno for n in ast.walk(tree)
              if isinstance(n, ast.Await | ast.AsyncFunctionDef | ast.AsyncWith | ast.AsyncFor)]
    assert awaits == []


def _time_source(node: ast.AST) -> str | None:
    """A wait or a time read that does not come from the injected clock."""
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in {("time", "monotonic"), ("time", "time"),
                                               ("asyncio", "wait_for"), ("asyncio", "timeout")}):
        return f"{node.value.id}.{node.attr}"
    if isinstance(node, ast.Attribute) and node.attr in ("call_later", "call_at"):
        owner = ast.unparse(node.value)
        return None if "clock" in owner else f"{owner}.{node.attr}"
    if (isinstance(node, ast.Call) and ast.unparse(node.func) == "asyncio.sleep"
            and not (node.args and isinstance(node.args[0], ast.Constant)
                     and node.args[0].value == 0)):
        return "asyncio.sleep"
    return None


def test_the_engine_and_the_daemon_take_time_from_the_clock() -> None:
    """Every wait and every duration of the engine and the daemon is the injected
    clock's (``hipq/clock.py``): no other timer, no other time (a yield,
    ``asyncio.sleep(0)``, is no wait)."""
    paths = [*(PACKAGE / "engine").glob("*.py"), PACKAGE / "daemon.py"]
    hits = [f"{p.relative_to(PACKAGE)}:{n.lineno}: {found}" for p in paths
            for n in ast.walk(ast.parse(p.read_text())) if (found := _time_source(n))]
    assert hits == []

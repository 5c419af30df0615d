"""Every file path and every ``hipq.`` module or attribute that the docs name exists:
the docs cannot drift from the code without a test failing. The docs are README.md
and docs/*.md (CHANGELOG.md is history: it may name files that are gone). A path
from the root (`hipq/engine/plan.py`), a name within a folder the text speaks of
(`live_jobs.py`, `engine/`, `api/dashboard/static/`), the files of a layout tree
(docs/internals.md, "Layout") and a dotted `hipq.engine.plan` each must resolve;
URLs, glob patterns and placeholders (`<name>`, `NAME`) are not names of files."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ROOTS = ("hipq", "tests", "bench", "plugins", "scripts", "deploy", "examples", "docs")
# `hipq/engine/batch.py`, `tests/contract/` (a folder), `bench/run`
PATH = re.compile(r"`((?:" + "|".join(ROOTS) + r")/[\w./-]*?)(?:::[\w:]+)?`")
# `hipq.engine.tick_driver`, `hipq.plugins.windows_of` (a module, then attributes)
DOTTED = re.compile(r"`(hipq(?:\.\w+)+)(?:\(\))?`")


# `live_jobs.py`, `engine/`, `api/dashboard/static/`: named within a folder the text is about
RELATIVE = re.compile(r"`((?:[a-z_][\w-]*/)+|(?:[a-z_][\w-]*/)*[a-z_][\w-]*\.py)`")
# files the reader makes, named as examples (README.md: "mytargets.py, beside hipq.yaml")
THE_READERS = ("mytargets.py",)
# a fenced block whose first line is a folder of the repository is a layout tree
TREE = re.compile(r"^```\n((?:" + "|".join(ROOTS) + r")/\n.*?)^```", re.M | re.S)
# a tree's entries: names ending in .py or /, indented two spaces a level
ENTRY = re.compile(r"([\w.-]+(?:\.py|/))(?=\s|$)")


FILES = (".yaml", ".db", ".json", ".sql", ".md")  # hipq.yaml, hipq.db: files, not modules
# what a run makes (screenshots, logs): ignored by git, so absent from a fresh clone
MADE = tuple(line.strip().lstrip("/") for line in
             (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
             if "/" in line.strip() and not line.startswith("#"))


def _named(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    """(doc, name) pairs; paths under a dot-folder (made by a run: ``bench/.logs/``)
    and file names that look dotted (``hipq.db``) are left out."""
    return sorted({(doc.name, m.group(1)) for doc in DOCS
                   for m in pattern.finditer(doc.read_text(encoding="utf-8"))
                   if "/." not in m.group(1) and not m.group(1).endswith(FILES)
                   and not m.group(1).startswith(MADE)})


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


@pytest.mark.parametrize(("doc", "path"), _named(PATH))
def test_every_path_the_docs_name_exists(doc: str, path: str) -> None:
    assert any(p.exists() for p in (ROOT / path, ROOT / path.rstrip("/"))), \
        f"{doc} names {path}, which does not exist"


@pytest.mark.parametrize(("doc", "dotted"), _named(DOTTED))
def test_every_module_the_docs_name_imports(doc: str, dotted: str) -> None:
    assert _resolves(dotted), f"{doc} names {dotted}, which does not resolve"


def _everything() -> set[str]:
    """Every file and folder of the repository's own folders, relative to the root
    (folders with a trailing /), dot-folders and caches left out."""
    found: set[str] = set()
    for top in ROOTS:
        for path in (ROOT / top).rglob("*"):
            parts = path.relative_to(ROOT).parts
            if any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            found.add("/".join(parts) + ("/" if path.is_dir() else ""))
    return found


def _relative_names() -> list[tuple[str, str]]:
    return sorted({(doc.name, m.group(1)) for doc in DOCS
                   for m in RELATIVE.finditer(doc.read_text(encoding="utf-8"))
                   if not m.group(1).startswith(tuple(f"{r}/" for r in ROOTS))
                   and m.group(1) not in THE_READERS})


@pytest.mark.parametrize(("doc", "name"), _relative_names())
def test_every_file_named_within_a_folder_exists(doc: str, name: str) -> None:
    """`live_jobs.py` or `engine/` in a sentence about `hipq/`: some file or folder of
    the repository ends so."""
    assert any(p == name or p.endswith("/" + name) for p in _everything()), \
        f"{doc} names {name}, which no file or folder of the repository is"


def _tree_paths() -> list[tuple[str, str]]:
    """The paths a layout tree draws: ``hipq/`` then ``  engine/`` then
    ``    plan.py  ...`` is hipq/engine/plan.py; several names on a line are siblings;
    a line indented past the names (a description going on) names nothing."""
    named: set[tuple[str, str]] = set()
    for doc in DOCS:
        for block in TREE.finditer(doc.read_text(encoding="utf-8")):
            folders: list[str] = []
            for line in block.group(1).splitlines():
                indent = len(line) - len(line.lstrip(" "))
                level, odd = divmod(indent, 2)
                if odd or level > len(folders) or not ENTRY.match(line.strip()):
                    continue
                del folders[level:]
                names = []
                for word in line.split():
                    if not ENTRY.fullmatch(word):
                        break
                    names.append(word)
                for name in names:
                    named.add((doc.name, "".join(folders) + name))
                if len(names) == 1 and names[0].endswith("/"):
                    folders.append(names[0])
    return sorted(named)


def test_the_layout_trees_are_read() -> None:
    assert ("internals.md", "hipq/engine/plan.py") in _tree_paths()


@pytest.mark.parametrize(("doc", "path"), _tree_paths())
def test_every_file_of_a_layout_tree_exists(doc: str, path: str) -> None:
    assert (ROOT / path).exists(), f"{doc}'s layout names {path}, which does not exist"

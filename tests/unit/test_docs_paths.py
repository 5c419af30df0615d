"""Every file path and every ``hipq.`` module or attribute that the docs name exists:
the docs cannot drift from the code without a test failing."""

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
# `hipq.engine.driver`, `hipq.plugins.windows_of` (a module, then attributes)
DOTTED = re.compile(r"`(hipq(?:\.\w+)+)(?:\(\))?`")


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

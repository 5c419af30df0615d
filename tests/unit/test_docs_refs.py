"""What the code cites exists: a comment or a docstring points at a page of ``docs/``
(or states the rule itself), never at a document the repository does not hold."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("hipq", "tests", "bench", "scripts", "plugins", "examples")
# code and the comments beside it: Python, the SQL the stores run, the dashboard's
# files, and the shell scripts (no suffix)
SUFFIXES = {".py", ".sql", ".js", ".css", ".html", ".sh", ""}
# built, so that this file does not cite it: the name of the outside document
# the code once pointed at ("<name> 15"), as a word (JOB_COLUMN_SPECS is no citation)
OUTSIDE_DOCUMENT = re.compile(r"\b" + "SP" + "EC" + r"\b")


def _code_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*")
                  if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
                  and not any(part.startswith(".") for part in p.relative_to(ROOT).parts))


def test_the_code_cites_no_document_outside_the_repository() -> None:
    hits = [f"{path.relative_to(ROOT)}:{number}"
            for path in _code_files()
            for number, line in enumerate(
                path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if OUTSIDE_DOCUMENT.search(line)]
    assert hits == [], "cite a page of docs/ or state the rule instead"


def test_the_check_sees_the_code() -> None:
    """The scan reads the package, its tests and its SQL (not an empty list)."""
    names = {str(p.relative_to(ROOT)) for p in _code_files()}
    assert {"hipq/engine/plan.py", "hipq/store/postgres.sql",
            "tests/unit/test_docs_refs.py", "scripts/test"} <= names

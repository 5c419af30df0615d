"""Text from outside never starts a log line nor reaches a terminal raw
(docs/security.md, "A downstream"): text logs and CLI output escape control
characters."""

from __future__ import annotations

import io
import logging
from datetime import UTC, datetime

import pytest

from hipq.cli import main
from hipq.cli.manage import jobs_table
from hipq.jobs import Job
from hipq.log import TextFormatter, printable

FORGED = "boom\n2026-01-01 00:00:00,000 ERROR hipq: forged\r\x1b[2J\x1b]0;pwned\x07\u2028x\x85"


def test_printable_escapes_every_control_character() -> None:
    out = printable(FORGED)
    assert out == ("boom\\n2026-01-01 00:00:00,000 ERROR hipq: forged\\r\\x1b[2J\\x1b]0;pwned"
                   "\\x07\\u2028x\\x85")
    assert printable("plain text, é and 日本") == "plain text, é and 日本"


def test_a_text_log_line_stays_one_line() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    logger = logging.getLogger("hipq.test_printable")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("try failed: %s", FORGED)
        try:
            raise ValueError(FORGED)
        except ValueError:
            logger.exception("with a traceback")
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("try failed: " + printable(FORGED))
    assert not any(line.startswith("2026-01-01") for line in lines)
    assert "\x1b" not in stream.getvalue()
    assert lines[1].endswith("with a traceback")
    assert all(line.startswith("  ") for line in lines[2:])  # no line passes for a record
    assert lines[2] == "  Traceback (most recent call last):"


def test_hipq_jobs_prints_escape_sequences_escaped() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    job = Job(queue="q", id="j", data={}, run_at=now, created_at=now, updated_at=now,
              status="failed", finished_at=now,
              error={"kind": "response_failed", "detail": "\x1b[2J\nfake row"})
    table = jobs_table([job], "failed")
    assert "\x1b" not in table
    assert table.count("\n") == 1  # the header and one row
    assert "\\x1b[2J\\nfake row" in table


def test_cli_errors_escape_control_characters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "-c", "/nonexistent/\x1b[2J.yaml"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "\\x1b[2J" in err

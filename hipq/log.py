"""Logging setup (called only from the CLI): plain text or one JSON object a line.

Text from outside (a downstream's error detail, a result, a response key) never
starts a log line nor reaches a terminal raw: the text format escapes control
characters in messages (:func:`printable`: a line break shows as ``\\n``, an escape
sequence as ``\\x1b``); the JSON format escapes them as JSON does. The CLI prints
outside text through :func:`printable` too.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

# C0 controls, DEL and C1 controls; and the line and paragraph separators that some
# terminals and log viewers take for line breaks
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def printable(text: str) -> str:
    """``text`` with every control character escaped (``\\n``, ``\\x1b``, ``\\u2028``)."""
    if not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100
                                else f"\\u{ord(char):04x}")


class TextFormatter(logging.Formatter):
    """The plain text format, one line per message. A traceback follows on lines that
    each start with two spaces (an exception's message may hold line breaks: none
    of its lines can pass for a new record), control characters escaped."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        text = super().formatException(ei)
        return "\n".join("  " + printable(line) for line in text.split("\n"))


_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(level: str = "INFO", json_format: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_format:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # APScheduler logs every run at INFO and warns about overlapping runs we allow on purpose.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)

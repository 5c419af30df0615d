"""JSON text, fast, for the values hipq encodes per job (a job's data as it is
stored, an enqueue's body hash, the ends a tick persists).

``json.dumps`` and ``JSONEncoder.encode`` build the C encoder anew on every call:
for a small object that is most of the cost (2.6 us against 0.55 for ``{"n": 1}``).
:func:`encoder` builds it once. Its output is ``JSONEncoder(**options).encode``'s;
anything the C encoder refuses (a value JSON cannot hold, a cycle, NaN where
``allow_nan`` is false) is encoded again by ``JSONEncoder`` itself, which raises
its own error. Where the interpreter has no C encoder, ``JSONEncoder`` is used.
:func:`json_of` reads JSON text the same way: one call of the C scanner.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _json_encoder
from typing import Any

_MAKE = getattr(_json_encoder, "c_make_encoder", None)


def encoder(*, sort_keys: bool = False, ensure_ascii: bool = True, allow_nan: bool = True,
            separators: tuple[str, str] = (", ", ": "),
            default: Callable[[Any], Any] | None = None) -> Callable[[Any], str]:
    """``JSONEncoder(...).encode`` with these options, its C encoder built once
    (``default``: what a value JSON cannot hold becomes, as for ``JSONEncoder``)."""
    plain = json.JSONEncoder(sort_keys=sort_keys, ensure_ascii=ensure_ascii,
                             allow_nan=allow_nan, separators=separators, default=default)
    if _MAKE is None:
        return plain.encode
    markers: dict[int, Any] = {}
    strings = (_json_encoder.encode_basestring_ascii if ensure_ascii
               else _json_encoder.encode_basestring)
    try:
        made = _MAKE(markers, plain.default, strings, None, separators[1], separators[0],
                     sort_keys, False, allow_nan)
    except TypeError:  # another signature than this interpreter's json module knows
        return plain.encode

    def encode(value: Any) -> str:
        if type(value) is str:
            return strings(value)
        try:
            return "".join(made(value, 0))
        except (TypeError, ValueError, RecursionError):
            markers.clear()  # what the failed walk left: it would see cycles later
            return plain.encode(value)  # its own answer, or its own error

    if encode({"a": [1, 2.5, None, True, "é\n"]}) != plain.encode(
            {"a": [1, 2.5, None, True, "é\n"]}):
        return plain.encode
    return encode


dumps = encoder()  # json.dumps(value) with its default options
compact = encoder(separators=(",", ":"))  # the same without spaces (what hipq sends and stores)


try:  # the C scanner json.loads itself ends in (CPython's _json)
    from _json import make_scanner as _make_scanner
except ImportError:  # pragma: no cover (another Python: json.loads)
    _SCAN: Callable[[str, int], tuple[Any, int]] | None = None
else:  # (typeshed types its argument as the scanner's own class: the decoder is right)
    _SCAN = _make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def json_of(text: str) -> Any:
    """``json.loads(text)`` for the text PostgreSQL sends (no whitespace around the
    value): one call of the decoder's C scanner, without ``json.loads``'s Python
    layers (0.7 µs against 3 for a small object). Anything else, an error
    included, goes through ``json.loads``."""
    if _SCAN is not None:
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:
            pass
        else:
            if end == len(text):
                return value
    return json.loads(text)

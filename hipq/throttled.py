"""``hipq.Throttled``: a Python target's "the partner said not now"
(docs/throttling.md, "The partner's word"; docs/configuration.md, "Python targets").

A Python target is itself the caller of its partner, so its word is the partner's:
raising :class:`Throttled` ends the try as ``throttled`` (the job goes back to
``queued``, its attempt not spent), pauses its scope for ``retry_after`` seconds
(capped by ``backoff.max_partner_seconds``; without one, the doubling from
``backoff.initial_seconds``) as a 429 does, and keeps ``usage`` in the try's error
data (``error.data.usage``). Its arguments are checked when it is made: a value
hipq could not act on is the function's bug, told at once, not a try that fails
later.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

DEFAULT_DETAIL = "throttled by the target (hipq.Throttled)"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _retry_after(value: Any) -> float | None:
    if value is None:
        return None
    if not _number(value):
        raise TypeError(f"Throttled: retry_after must be a number of seconds or None, "
                        f"not {type(value).__name__}")
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float: finite, and capped anyway
        raise ValueError("Throttled: retry_after is too large for a number of seconds "
                         "(at most about 1.8e308)") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"Throttled: retry_after must be a finite number of seconds "
                         f">= 0, not {value!r}")
    return seconds


def _usage(value: Any) -> dict[str, int | float] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"Throttled: usage must be a mapping of names to numbers or None, "
                        f"not {type(value).__name__}")
    out: dict[str, int | float] = {}
    for name, amount in value.items():
        if not isinstance(name, str):
            raise TypeError(f"Throttled: usage names must be str, not {type(name).__name__} "
                            f"({name!r})")
        if not _number(amount):
            raise TypeError(f"Throttled: usage[{name!r}] must be a number, "
                            f"not {type(amount).__name__}")
        if isinstance(amount, float) and not math.isfinite(amount):
            raise ValueError(f"Throttled: usage[{name!r}] must be finite, not {amount!r}")
        if amount < 0:
            raise ValueError(f"Throttled: usage[{name!r}] must be >= 0, not {amount!r}")
        if isinstance(amount, int) and amount.bit_length() > 63:
            raise ValueError(f"Throttled: usage[{name!r}] must be an integer within 64 bits")
        out[name] = amount
    return out


class Throttled(Exception):  # the partner's word, not an error of the target
    """Raised by a Python target: the partner said "not now" to this try.

    ``retry_after``: seconds until the partner takes calls again (a finite number
    >= 0), or None for the doubling back-off. ``usage``: what the refused call cost
    as the partner counted it (``{"requests": 1, "cost": 812}``: names to finite
    numbers >= 0), or None. ``detail``: the pause's reason, shown with the pause and
    in the try's error. TypeError or ValueError for a bad argument."""

    def __init__(self, detail: str = DEFAULT_DETAIL, *, retry_after: float | None = None,
                 usage: Mapping[str, int | float] | None = None) -> None:
        if not isinstance(detail, str):
            raise TypeError(f"Throttled: detail must be str, not {type(detail).__name__} "
                            f"(give the seconds as retry_after=...)")
        self.retry_after = _retry_after(retry_after)
        self.usage = _usage(usage)
        self.detail = detail or DEFAULT_DETAIL
        super().__init__(self.detail)

    def __repr__(self) -> str:
        return (f"Throttled({self.detail!r}, retry_after={self.retry_after!r}, "
                f"usage={self.usage!r})")

    def error(self) -> dict[str, Any]:
        """The try's error data, as an HTTP target's 429 gives it (``detail``, and
        ``retry_after``, ``usage`` when given)."""
        out: dict[str, Any] = {"detail": self.detail}
        if self.retry_after is not None:
            out["retry_after"] = self.retry_after
        if self.usage is not None:
            out["usage"] = dict(self.usage)
        return out

"""Giving freed memory back to the system.

CPython frees small objects into its own pools and larger blocks into the C
library's heap. glibc keeps the heap's free pages mapped (it only trims the top of
the heap) until ``malloc_trim`` hands them back: after startup (the imports, the
pools, the first tick) about 1.5 MB, after an adoption of 100,000 running jobs
about 2 MB more. :func:`release` calls it; it is done in code (glibc's
``malloc_trim(0)`` through :mod:`ctypes`), needs no setting, and does nothing on a
C library without it (musl, macOS). It costs a few milliseconds on a 100 MB heap,
so it runs at startup and after large changes of the batch, never per job.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    try:
        import ctypes  # about 0.3 MB: loaded once memory is to be given back
    except ImportError:
        return None
    try:
        function = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None
    if function is None:
        return None
    function.argtypes, function.restype = [ctypes.c_size_t], ctypes.c_int
    trim: Callable[[int], int] = function
    return trim


def release() -> bool:
    """Return the C heap's free pages to the system; False where it cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True

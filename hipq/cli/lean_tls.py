"""aiohttp's default client TLS contexts, with the system's CA certificates loaded at
their first handshake rather than at import (``hipq run`` only, see
:func:`hipq.cli.lean_imports`).

Importing aiohttp builds two client contexts (``aiohttp.connector``: the verifying
default, and the one ``ssl=False`` uses), and each loads the system's CA bundle:
about 2 MB of the daemon's memory (OpenSSL parses every certificate), for contexts
the daemon itself never uses (its HTTP targets build their own context when they
first reach an ``https://`` URL, :mod:`hipq.targets.http_pool`). Plugins and Python
targets may use aiohttp's client, so the contexts stay as they are, with one
difference: the bundle is loaded just before a context first wraps a connection
(``wrap_bio``, what asyncio and uvloop call; ``wrap_socket``), from the same paths
(``SSL_CERT_FILE``, ``SSL_CERT_DIR``, the system default), once, under a lock. A
connection made through them verifies as it always did. Every other context of the
process loads its certificates as usual: the deferral applies only while
``aiohttp.connector`` is imported.
"""

from __future__ import annotations

import ssl
import sys
import threading
from typing import Any


def defer_aiohttp_ca_loading() -> bool:
    """Import ``aiohttp.connector`` with its contexts' CA loading deferred; False
    (nothing done) if it was imported already."""
    if "aiohttp.connector" in sys.modules:
        return False
    context_class = ssl.SSLContext
    own = context_class.__dict__.get("set_default_verify_paths")  # (the C base class's)
    context_class.set_default_verify_paths = _deferred  # type: ignore[method-assign,assignment]
    try:
        import aiohttp.connector  # noqa: F401  (its contexts are made at import)
    finally:
        if own is None:
            del context_class.set_default_verify_paths
        else:
            context_class.set_default_verify_paths = own  # type: ignore[method-assign]
    return True


def _deferred(context: ssl.SSLContext) -> None:
    """Stands for ``set_default_verify_paths`` while aiohttp's contexts are made:
    the context loads them before its first wrap."""
    lock = threading.Lock()

    def load() -> None:
        with lock:  # another thread's wrap waits until the certificates are in
            if "wrap_bio" in vars(context):
                context.set_default_verify_paths()
                del context.wrap_bio, context.wrap_socket

    def wrap_bio(*args: Any, **kwargs: Any) -> ssl.SSLObject:
        load()
        return context.wrap_bio(*args, **kwargs)

    def wrap_socket(*args: Any, **kwargs: Any) -> ssl.SSLSocket:
        load()
        return context.wrap_socket(*args, **kwargs)

    context.wrap_bio = wrap_bio  # type: ignore[method-assign]
    context.wrap_socket = wrap_socket  # type: ignore[method-assign]

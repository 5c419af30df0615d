"""Requests from web pages (docs/security.md, "A web page").

A browser lets any page send a request to any address, ``127.0.0.1`` included,
without asking the user: a form, or ``fetch(url, {mode: "no-cors", body})`` with no
Content-Type (no CORS preflight either). The page cannot read the answer, but the
request arrives. Two rules keep such requests from changing anything:

* **Cross-site requests** to a route that changes anything (any method but GET,
  HEAD and OPTIONS) get 403 ``cross_site`` when their ``Origin`` is not the API's
  own (``api.public_url``, or the scheme and host the request reached), or when
  they carry ``Sec-Fetch-Site: cross-site`` or ``same-site`` (another port or
  subdomain of the same site is another origin too). It holds with or without
  tokens. Tools that send no ``Origin`` (curl, the client, downstreams) are not
  affected; the dashboard's own requests carry its origin and pass.
* **DNS rebinding**: a page whose host name is made to resolve to ``127.0.0.1``
  becomes same-origin with a daemon there and could read its answers too. A daemon
  without tokens (so, listening on loopback, unless ``api.allow_insecure``) answers
  only requests whose ``Host`` is a loopback address, ``localhost``, ``api.host`` or
  the host of ``api.public_url``; others get 403 ``host_not_allowed``. With tokens
  a rebound page has no token to send, so every host is served.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from aiohttp import web

from hipq.api.api_errors import ApiError
from hipq.config import ApiConfig

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CROSS_SITE = frozenset({"cross-site", "same-site"})
DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]


def origin_of(url: str) -> Origin | None:
    """(scheme, host, port) of an absolute http(s) URL or ``Origin`` value; None for
    anything else (``null``, garbage)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in DEFAULT_PORTS or not host:
        return None
    return scheme, host, port or DEFAULT_PORTS[scheme]


def host_name(host_header: str) -> str:
    """The name in a ``Host`` header, without its port and brackets, lower-cased."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def is_loopback(name: str) -> bool:
    """Whether a host name or address is this machine's loopback ("" is every address)."""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class SameOrigin:
    """The checks above, built once from the API's settings."""

    def __init__(self, config: ApiConfig) -> None:
        self._public = origin_of(config.public_url) if config.public_url else None
        self._hosts: frozenset[str] | None = None  # None: every host is served
        if not config.tokens and not config.allow_insecure:
            names = {host_name(config.host)}
            if self._public is not None:
                names.add(self._public[1])
            self._hosts = frozenset(names)

    def check(self, request: web.Request) -> None:
        """Raise 403 unless ``request`` may go on (before auth and body checks)."""
        if self._hosts is not None:
            name = host_name(request.host)
            if name not in self._hosts and not is_loopback(name):
                raise ApiError(403, "host_not_allowed",
                               "this daemon has no tokens and answers only on loopback "
                               "host names; set api.public_url or api.tokens")
        if request.method in SAFE_METHODS:
            return
        if request.headers.get("Sec-Fetch-Site", "").lower() in CROSS_SITE:
            raise _cross_site()
        origin = request.headers.get("Origin")
        if origin is not None and not self._own(origin, request):
            raise _cross_site()

    def _own(self, origin: str, request: web.Request) -> bool:
        theirs = origin_of(origin)
        if theirs is None:
            return False
        return theirs == self._public or theirs == origin_of(f"{request.scheme}://{request.host}")


def _cross_site() -> ApiError:
    return ApiError(403, "cross_site", "a request from another site may not change "
                                       "anything here (its Origin is not this API's)")

"""What a launch must pass before ``callback_app`` runs it: its callback URL must be
hipq's signed response route on a hipq origin (:class:`Origins`), and the launch
must carry hipq's credentials (:func:`authorization`).

``hipq_urls`` are the base URLs of the hipq daemons (their ``api.public_url``),
parsed once. A callback URL passes when, parsed the way aiohttp sends it (yarl:
dot segments removed, ``%2e%2e`` included, host lower-cased, default port filled
in), its scheme, host and port are a base's and it is exactly hipq's signed
response route under that base (docs/http-api.md): ``<base path>v1/responses/{key}``
with a non-empty ``sig`` in the query and no fragment. That parse is the check, and
the parsed URL is the one posted to, so what was checked is what is sent.

Any other path on a hipq origin is refused like a foreign origin: a launch names
its callback URL, so without this rule anyone who reaches the downstream could make
it POST to hipq's pause, replay or status routes (on a daemon without tokens they
need none). The key must be one path segment that stays one under any decoding a
proxy in front of hipq may do: after percent-decoding, once or again, no piece
between ``/`` or ``\\`` may be empty, ``.`` or ``..`` (also before a ``;``
parameter), so ``..%2Fjobs%2Fq%2Fpause``, ``a%2F%2Fb`` or ``..;x`` are refused,
while a key holding a slash (``a%2Fb``, as hipq signs it) passes.
``http://hipq:80801/``, ``http://hipq:8080@evil/``, ``http://hipq:8080/base/../admin``
or userinfo do not pass either. A bad base URL or a bad ``auth`` raises
``ValueError`` when the application is built, never at a launch.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from unicodedata import normalize
from urllib.parse import unquote

from yarl import URL

Origin = tuple[str, str, int]  # scheme, host (as yarl encodes it), port
RESPONSE_ROUTE = "v1/responses/"  # under a base path: POST .../v1/responses/{key}?...sig=...
_SEPARATORS = re.compile(r"[/\\]")  # what a server or a proxy may take for a path separator
AUTH_SHAPES = "{type: bearer, token} or {type: basic, username, password}"


class Origins:
    """The hipq base URLs callbacks may go to."""

    def __init__(self, hipq_urls: str | Sequence[str]) -> None:
        urls = [hipq_urls] if isinstance(hipq_urls, str) else list(hipq_urls)
        if not urls:
            raise ValueError("hipq_urls: give the base URL of at least one hipq daemon")
        self._paths: dict[Origin, tuple[str, ...]] = {}
        for index, text in enumerate(urls):
            origin, path = _base(text, index)
            self._paths[origin] = (*self._paths.get(origin, ()), path)

    def target(self, callback_url: str) -> URL | None:
        """``callback_url`` parsed as it will be sent, if it is the signed response
        route under a base; else None."""
        try:
            url = URL(callback_url)
            signed = bool(url.query.get("sig"))
        except (ValueError, TypeError):
            return None
        if (url.raw_user is not None or url.raw_password is not None or url.port is None
                or url.raw_fragment or not signed):
            return None
        path = url.raw_path
        for base in self._paths.get((url.scheme, url.raw_host or "", url.port), ()):
            route = base + RESPONSE_ROUTE
            if path.startswith(route) and one_segment(path[len(route):]):
                return url
        return None


def one_segment(raw: str) -> bool:
    """Whether ``raw`` (a percent-encoded path segment) is one segment however often
    it is decoded: no piece between separators empty, ``.`` or ``..``, also once
    full-width forms are folded (NFKC, as some servers do: U+FF0E is a dot)."""
    if "/" in raw:
        return False
    text = raw
    while True:
        for piece in _SEPARATORS.split(text) + _SEPARATORS.split(normalize("NFKC", text)):
            if not piece or piece.split(";", 1)[0] in (".", ".."):
                return False
        decoded = unquote(text)
        if decoded == text:
            return True
        text = decoded  # shorter each time: the loop ends


def _base(text: object, index: int) -> tuple[Origin, str]:
    """(origin, path ending in '/') of one hipq base URL."""
    problem = f"hipq_urls[{index}] must be a hipq base URL: http[s]://host[:port][/path]"
    if not isinstance(text, str):
        raise ValueError(problem)
    try:
        url = URL(text)
    except ValueError:
        raise ValueError(problem) from None
    if (url.scheme not in ("http", "https") or not url.raw_host or url.port is None
            or url.raw_user is not None or url.raw_password is not None
            or url.raw_query_string or url.raw_fragment):
        raise ValueError(problem)
    return (url.scheme, url.raw_host, url.port), url.raw_path.rstrip("/") + "/"


def authorization(auth: Mapping[str, str] | None) -> bytes | None:
    """The ``Authorization`` header hipq sends for an HTTP target's ``auth`` (the
    same shapes), to compare launches against; None without ``auth``."""
    if auth is None:
        return None
    kind = auth.get("type", "bearer" if "token" in auth else "basic")
    if kind == "bearer" and auth.get("token"):
        value = f"Bearer {auth['token']}"
    elif kind == "basic" and "username" in auth:
        pair = f"{auth['username']}:{auth.get('password', '')}".encode()
        value = "Basic " + base64.b64encode(pair).decode()
    else:
        raise ValueError(f"auth must be {AUTH_SHAPES}")
    if any(char in value for char in "\r\n\x00"):
        raise ValueError("auth: a line break or a NUL character in the credentials")
    return value.encode()

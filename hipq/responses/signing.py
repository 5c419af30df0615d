"""Signed callback URLs.

A launched try gets ``{public_url}/v1/responses/{correlation_key}?attempt=N&t=T&sig=S``
where ``T`` is the job's token (random, made at enqueue, never reused) and ``S`` is
HMAC-SHA256 (hex) over the key, the attempt and the token. The downstream needs no
API token: the signature is its proof that hipq issued this URL for this try of
this job. Changing any part breaks the signature; checks are constant-time. The
token travels with the response into the inbox, and the reconcile loop applies it
to that job's try only, so a URL keeps no power over a later job that reuses the
key (a template key, in any queue), the id, or both.

The signing key comes from ``signing_key`` in the config, or is generated once and
stored in the database (``hipq_meta``), so every daemon of a cluster and every
restart signs and checks with the same key.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from urllib.parse import quote, quote_plus

from hipq.store import Store

SIGNING_KEY_META = "signing_key"
# what quote(text, safe="") and quote_plus(text) leave as it is; and the same with
# colons, which quote(text, safe="") writes %3A (template keys: "{data.id}:{data.v}")
_PLAIN = re.compile(r"[A-Za-z0-9_.~-]*").fullmatch
_PLAIN_OR_COLON = re.compile(r"[A-Za-z0-9_.~:-]*").fullmatch


_BLOCK = 64  # SHA-256's block size (RFC 2104's B)
# what a Kafka response signature covers first (docs/kafka.md, "Signed responses"): a
# callback URL's signature covers "<attempt>\n<token>\n<key>", and no attempt is
# written "hipq/...", so neither signature is ever the other
RESPONSE_LABEL = b"hipq/kafka-response/v1\n"
MAX_ATTEMPT_DIGITS = 10  # an attempt is at most 2^31-1


class Signer:
    def __init__(self, key: str) -> None:
        if not key:
            raise ValueError("the signing key must not be empty")
        self._key = key.encode()
        # HMAC-SHA256 (RFC 2104) with the key's inner and outer pads hashed once: each
        # signature copies the two states (0.65 µs against 2.2 for ``hmac.digest``,
        # which sets the key up again every call; every try signs twice, issue 28)
        block = (hashlib.sha256(self._key).digest() if len(self._key) > _BLOCK
                 else self._key).ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    def instance(self) -> str:
        """Names the database this key belongs to, without telling the key (an HMAC
        of a constant): ``/healthz`` shows it, so a CLI can tell whether the daemon
        that answers on its config's port works on its own database."""
        return hmac.new(self._key, b"hipq instance", hashlib.sha256).hexdigest()[:16]

    def sign(self, correlation_key: str, attempt: int, token: str) -> str:
        inner = self._inner.copy()
        inner.update(f"{attempt}\n{token}\n{correlation_key}".encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()  # hmac.digest(key, message, "sha256").hex()

    def verify(self, correlation_key: str, attempt: int, token: str, signature: str) -> bool:
        expected = self.sign(correlation_key, attempt, token)
        return hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace"))

    def response_signature(self, correlation_key: str, attempt: int, token: str) -> str:
        """The ``Hipq-Signature`` of a Kafka launch, which its response carries back:
        ``<attempt>.<token>.<mac>``, ``mac`` the HMAC-SHA256 (hex) of RESPONSE_LABEL,
        the attempt, the job's token and the key. It names one try of one job, like
        the callback URL's ``sig``, and is never that ``sig``."""
        inner = self._inner.copy()
        inner.update(RESPONSE_LABEL + f"{attempt}\n{token}\n{correlation_key}".encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        return f"{attempt}.{token}.{outer.hexdigest()}"

    def signed_try(self, correlation_key: str, signature: str) -> tuple[int, str] | None:
        """(attempt, token) of the try ``signature`` was issued for, when it is this
        key's :meth:`response_signature` for ``correlation_key`` (checked in constant
        time, written exactly so); None for anything else."""
        attempt, _, rest = signature.partition(".")
        token, _, _ = rest.rpartition(".")
        if not (token and 0 < len(attempt) <= MAX_ATTEMPT_DIGITS and attempt.isascii()
                and attempt.isdigit()):
            return None
        expected = self.response_signature(correlation_key, int(attempt), token)
        if not hmac.compare_digest(expected.encode("utf-8", "replace"),
                                   signature.encode("utf-8", "replace")):
            return None
        return int(attempt), token

    def callback_url(self, public_url: str, correlation_key: str, attempt: int,
                     token: str) -> str:
        # what urlencode({"attempt", "t", "sig"}) and quote(key, safe="") make, without
        # their per-character work for the usual plain keys and tokens (issue 28)
        if _PLAIN_OR_COLON(correlation_key):
            key = correlation_key.replace(":", "%3A")
        else:
            key = quote(correlation_key, safe="")
        t = token if _PLAIN(token) else quote_plus(token)
        sig = self.sign(correlation_key, attempt, token)
        return f"{public_url.rstrip('/')}/v1/responses/{key}?attempt={attempt}&t={t}&sig={sig}"


async def load_signer(store: Store, configured: str | None) -> Signer:
    """The configured key, else the one stored in the database (made on first use)."""
    if configured:
        return Signer(configured)
    return Signer(await store.meta_get_or_set(SIGNING_KEY_META, secrets.token_hex(32)))
